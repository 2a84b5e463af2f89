// The CUDA launch of flash_attention_backward (kernels/ejk/kernels/cuda/flash_bwd.cuh): one
// block of one warp per task of flash_bwd_tasks, the f32 dbias sums in the stream's scratch.
// Built with CUDA only.
#include <fmt/format.h>

#include <climits>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/flash_attention/flash_bwd_op.h"

namespace ejk::ops {
namespace {

size_t dbias_work_bytes(const FlashBwdParams& p) {
  if (!p.dbias) return 0;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  return size_t(pl.batches * pl.heads * p.fwd.seqlen_q * p.fwd.seqlen_k) * sizeof(float);
}

}  // namespace

engine::OpDef::Workspace FlashAttentionBackwardOp::cuda_workspace(const engine::Bound& b,
                                                                  const engine::PlanData&) const {
  return {dbias_work_bytes(params(b)), 0};
}

void FlashAttentionBackwardOp::cuda_launch(const engine::Bound& b, const engine::PlanData&,
                                           engine::CudaLaunchContext& lc) const {
  FlashBwdParams p = params(b);
  p.dbias_work = p.dbias ? static_cast<float*>(lc.scratch()) : nullptr;
  if (b.has(dbias) && !b.has(bias)) p.zero_dbias = b.data(dbias);
  if (b.has(dsoftmax_aux) && !b.has(softmax_aux)) p.zero_dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  const int64_t tasks = flash_bwd_tasks(p, cuda::kFlashBwdBlock, cuda::kFlashBwdBlock).total();
  if (tasks > INT32_MAX) throw InvalidArgument(fmt::format("{}: {} tasks exceed the grid", name(), tasks));
  if (tasks == 0 && !p.zero_dbias && !p.zero_dsoftmax_aux) return;
  void* args[] = {&p};
  lc.launch(0, engine::Grid{unsigned(std::max<int64_t>(tasks, 1)), 1, 1}, cuda::kFlashBwdBlock, 0, args);
}

}  // namespace ejk::ops
