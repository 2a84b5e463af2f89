// MergeAttentionStatesOp's CUDA launch, with the CUDA build: the access width the tensors allow,
// lanes per row, and one wave of blocks.
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/merge_attention_states/merge_op.h"

namespace ejk::ops {
namespace {

// Whether every out tensor can be read and written in chunks of `vec` elements (16 bytes): the
// bases 16-byte aligned, head_dim and every stride the kernel steps by multiples of vec.
bool chunks_allowed(const MergeStatesParams& p, int64_t vec) {
  const void* bases[3] = {p.out_a, p.out_b, p.out};
  bool ok = p.head_dim % vec == 0;
  for (int k = 0; k < 3; ++k) {
    ok = ok && reinterpret_cast<uintptr_t>(bases[k]) % 16 == 0 && p.out_stride_t[k] % vec == 0 &&
         p.out_stride_h[k] % vec == 0;
    for (int d = 0; d < p.lead_rank; ++d) ok = ok && p.out_lead_stride[k][d] % vec == 0;
  }
  return ok;
}

}  // namespace

void MergeAttentionStatesOp::cuda_launch(const engine::Bound& b, const engine::PlanData&,
                                         engine::CudaLaunchContext& lc) const {
  MergeStatesParams p = params(b);
  if (p.rows == 0) return;
  if (p.rows >= (int64_t{1} << 31))
    throw InvalidArgument(fmt::format("merge_attention_states (CUDA): {} rows (leading dims x H x T); expected fewer "
                                      "than 2^31 (the kernel numbers rows in 32 bits): split the call", p.rows));
  const int64_t vec = 16 / int64_t(dtype_size(b.dtype));
  p.vec_elems = chunks_allowed(p, vec) ? int32_t(vec) : 1;  // else one element per lane, still coalesced
  // A lane per kMergeChunksPerLane chunks of the row, up to a warp: more bytes in flight per
  // lane for each row's fixed cost (the LSEs, exp and log, the index arithmetic).
  const int64_t chunks = std::max<int64_t>(1, p.head_dim / p.vec_elems);
  const uint64_t lanes = uint64_t(ceil_div<int64_t>(chunks, kMergeChunksPerLane));
  p.lanes_per_row = int32_t(std::min<uint64_t>(32, std::bit_ceil(lanes)));
  const int64_t rows_per_block = kMergeStatesThreads / p.lanes_per_row;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(p.rows, rows_per_block),
                                           int64_t(lc.device().sm_count) * kMergeStatesBlocksPerSm);
  void* args[] = {&p};  // by value: the kernel's __grid_constant__ parameter
  lc.launch(0, engine::Grid{unsigned(blocks)}, kMergeStatesThreads, 0, args);
}

}  // namespace ejk::ops
