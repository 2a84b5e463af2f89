// Arguments of the block-sparse attention kernels, shared by every backend and the reference.
// Plain data: the runtime fills it after validating shapes; kernels trust it.
//
// The math is flash attention's (mask.h: scale, softcap, sinks; causal top-left and the sliding
// window by index; segment ids with -1 as padding) with one more rule: query i sees key j only if
// the block layout lists the block (i / block_q, j / block_k) for i's batch and head. The runtime
// turns the layout (and the position and segment masks) into the compressed lists below once per
// call (docs/design/blocksparse.md); kernels never read the layout itself.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk {

// An entry of a block list: the other side's block index and whether every pair of the block is
// visible (then no element of it needs a mask).
EJK_HD i32 bsa_entry(i64 block, bool full) { return i32(block * 2 + (full ? 1 : 0)); }
EJK_HD i64 bsa_entry_block(i32 e) { return i64(e >> 1); }
EJK_HD bool bsa_entry_full(i32 e) { return (e & 1) != 0; }

// Per (batch, layout head, query block) the key blocks with a visible pair, in increasing order
// (rows), and per (batch, layout head, key block) the query blocks (columns, for dk and dv).
// Layout heads: 1 (one layout for every head) or heads_q.
struct BlocksparseLists {
  const i32* row_offsets;  // [batch * heads * num_q_blocks + 1]
  const i32* row_entries;  // bsa_entry(key block, full)
  const i32* col_offsets;  // [batch * heads * num_k_blocks + 1]; null in the forward
  const i32* col_entries;  // bsa_entry(query block, full)
  i64 heads;
  i64 block_q, block_k;    // the layout's block sizes (tokens)
  i64 num_q_blocks, num_k_blocks;
};

EJK_HD i64 bsa_row(const BlocksparseLists& l, i64 b, i64 h, i64 qb) {
  return (b * l.heads + (l.heads == 1 ? 0 : h)) * l.num_q_blocks + qb;
}
EJK_HD i64 bsa_col(const BlocksparseLists& l, i64 b, i64 h, i64 kb) {
  return (b * l.heads + (l.heads == 1 ? 0 : h)) * l.num_k_blocks + kb;
}

// Forward: q, k, v, out [B, H, S, D] through FlashFwdParams' strides (BHSD is a stride order),
// lse [B, Hq, Sq]; no bias, no varlen.
struct BlocksparseFwdParams {
  FlashFwdParams f;
  BlocksparseLists lists;
};

// The block layout as the CUDA kernels read it, in place on the device: element (b, h, qb, kb) at
// mask + b * stride_b + h * stride_h + qb * stride_q + kb * stride_k (a broadcast dim has stride
// 0); null: every block. Each CUDA block turns its row into its list of key blocks
// (docs/design/blocksparse.md, "CUDA").
struct BlocksparseLayout {
  const unsigned char* mask;
  i64 stride_b, stride_h, stride_q, stride_k;
  i64 block_q, block_k;  // the layout's block sizes (tokens)
  i64 num_q_blocks, num_k_blocks;
};

// Shared memory of a CUDA block's two bitmaps over a layout row of num_k_blocks blocks.
EJK_HD constexpr i64 bsa_bitmap_bytes(i64 num_k_blocks) { return 2 * 4 * ((num_k_blocks + 31) / 32); }

// CUDA forward: flash's parameters (BHSD strides, no bias, no varlen) and the layout.
struct BlocksparseFwdCudaParams {
  FlashFwdParams f;
  BlocksparseLayout layout;
};

// CUDA backward: flash's (no bias, no varlen, no dropout) and the layout.
struct BlocksparseBwdCudaParams {
  FlashBwdParams g;
  BlocksparseLayout layout;
};

// Shared memory of a CUDA dK/dV block's bitmaps: a layout column per query head of the group.
EJK_HD constexpr i64 bsa_column_bitmap_bytes(i64 group, i64 num_q_blocks) { return 4 * group * ((num_q_blocks + 31) / 32); }

// Backward: FlashBwdParams (no bias), with both lists.
struct BlocksparseBwdParams {
  FlashBwdParams g;
  BlocksparseLists lists;
};

// The CPU backward's task list, in this order: dk/dv tasks (sequence, kv head, block_k keys),
// dq tasks (sequence, q head, block_q queries), sink tasks (one per sink row).
EJK_HD FlashBwdTasks bsa_bwd_tasks(const BlocksparseBwdParams& bp, i64 block_q, i64 block_k) {
  const FlashFwdParams& f = bp.g.fwd;
  const i64 sink_rows = bp.g.dsoftmax_aux ? (f.sinks_stride_h != 0 ? f.heads_q : 1) : 0;
  return {f.batch * f.heads_kv * ceil_div(f.seqlen_k, block_k), f.batch * f.heads_q * ceil_div(f.seqlen_q, block_q),
          sink_rows};
}

}  // namespace ejk
