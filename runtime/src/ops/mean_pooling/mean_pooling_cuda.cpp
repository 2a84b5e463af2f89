// The CUDA launch plan of mean pooling (kernels/ejk/kernels/cuda/mean_pooling.cuh): the access
// width from the tensors' alignment, row groups and column tiles from D, chunks that fill the
// device, and the forward's combine pass with its scratch. Built with CUDA only.
#include <algorithm>
#include <cstdint>

#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/mean_pooling/mean_pooling_op.h"

namespace ejk::ops {
namespace {

struct MeanPoolLaunch {
  MeanPoolParams p;
  bool combine = false;  // forward: a second launch adds the partial sums of cut sequences
  size_t scratch_bytes = 0;
};

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

MeanPoolLaunch plan_launch(const MeanPoolingOp& op, const engine::Bound& b, int sm_count) {
  MeanPoolLaunch l{op.params(b)};
  MeanPoolParams& p = l.p;
  // 16-byte accesses where every row starts 16-byte aligned; else one element per thread.
  const int64_t wide = 16 / int64_t(dtype_size(b.dtype));
  const bool vec = aligned16(p.tokens) && aligned16(p.rows) && p.dim % wide == 0 && p.tok_stride_b % wide == 0 &&
                   p.tok_stride_t % wide == 0 && p.row_stride % wide == 0;
  p.vec = int(vec ? wide : 1);
  p.lanes = 1;
  while (p.lanes < 32 && p.lanes * p.vec < p.dim) p.lanes *= 2;
  p.col_tile = p.lanes * p.vec;
  p.col_tiles = ceil_div<int64_t>(p.dim, p.col_tile);
  // Two full waves of equal chunks (a long sequence's partial sums stay few), 8 to 1024 tokens
  // per row group.
  const int64_t groups = kMeanPoolThreads / p.lanes;
  const int64_t per_sm = op.backward ? kMeanPoolBwdBlocksPerSm : kMeanPoolFwdBlocksPerSm;
  const int64_t blocks = std::max<int64_t>(1, 2 * per_sm * sm_count / p.col_tiles);
  p.chunk = std::clamp<int64_t>(ceil_div<int64_t>(p.total, blocks), 8 * groups, 1024 * groups);
  // Dense sequences no longer than a chunk: whole ones per chunk, so none is cut.
  const bool dense = p.cu_seqlens == nullptr;
  if (dense && p.seqlen > 0 && p.seqlen <= p.chunk) p.chunk -= p.chunk % p.seqlen;
  p.chunk = std::max<int64_t>(p.chunk, ceil_div<int64_t>(p.total, 65535));  // chunks on gridDim.y
  p.chunks = std::max<int64_t>(1, ceil_div<int64_t>(p.total, p.chunk));
  l.combine = !op.backward && p.chunks > 1 && !(dense && p.chunk % p.seqlen == 0);
  if (l.combine) l.scratch_bytes = size_t(p.chunks) * 2 * size_t(p.dim) * sizeof(float);
  return l;
}

}  // namespace

engine::OpDef::Workspace MeanPoolingOp::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  return {plan_launch(*this, b, cuda::use_device(plan.device.index).sm_count).scratch_bytes, 0};
}

void MeanPoolingOp::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  MeanPoolLaunch l = plan_launch(*this, b, lc.device().sm_count);
  if (l.p.sequences == 0 || l.p.dim == 0) return;
  l.p.partials = static_cast<float*>(lc.scratch());
  const engine::Grid grid{unsigned(l.p.col_tiles), unsigned(l.p.chunks), 1};
  void* args[] = {&l.p};  // copied at each launch
  lc.launch(0, grid, kMeanPoolThreads, 0, args);
  if (!l.combine) return;
  l.p.phase = 1;
  lc.launch(0, grid, kMeanPoolThreads, 0, args);
}

}  // namespace ejk::ops
