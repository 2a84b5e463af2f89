// The block lists of a block-sparse call (BlocksparseLists), built on the host from the block
// layout, the position mask (causal, window) and the segment ids: a block enters a list only if
// some pair of it is visible, and is marked full when every pair is.
#pragma once
#include <cstdint>
#include <vector>

#include "ejk/kernels/common/blocksparse_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/tensor.h"

namespace ejk::ops {

struct BlocksparseListInputs {
  const TensorView* block_mask = nullptr;  // u8 [B|1, Hq|1, NQ, NK] on the CPU, or null: every block
  const TensorView* q_segment_ids = nullptr;  // i32 [B, Sq] on the CPU, or null
  const TensorView* kv_segment_ids = nullptr;
  MaskSpec mask;
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0;
};

// Rows (and, with columns, the transposed lists) in `shape`'s sizes, as int32 arrays:
// row_offsets, row_entries, col_offsets, col_entries.
struct BlocksparseListData {
  std::vector<int32_t> row_offsets, row_entries, col_offsets, col_entries;
};
BlocksparseListData build_block_lists(const BlocksparseListInputs& in, const BlocksparseLists& shape, bool columns);

// Whether the layout lists block (qb, kb) of batch b and head h (true without a layout).
bool layout_allows(const TensorView* block_mask, int64_t b, int64_t h, int64_t qb, int64_t kb);

}  // namespace ejk::ops
