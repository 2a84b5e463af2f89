// The CUDA launch of flash_attention_backward. Bias variants and head dims that are no multiple
// of 16: the scalar kernel (kernels/ejk/kernels/cuda/flash_bwd.cuh), one block of one warp per
// task of flash_bwd_tasks, the f32 dbias sums in the stream's scratch. Everything else: the
// tensor-core kernels (flash_bwd_tc.cuh), launched by flash_bwd_tc_cuda.h. Built with CUDA only.
#include <algorithm>
#include <string>

#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/flash_bwd_op.h"
#include "ops/flash_attention/flash_bwd_tc_cuda.h"
#include "ops/flash_attention/flash_mask_tiles_cuda.h"

namespace ejk::ops {
namespace {

bool tensor_cores(const FlashBwdParams& p) { return cuda::flash_bwd_tensor_cores(p.fwd.bias != nullptr, p.fwd.head_dim); }

// Query rows of lse's layout (delta has it too).
int64_t lse_rows(const FlashBwdParams& p) {
  const FlashFwdParams& f = p.fwd;
  return f.heads_q * (f.cu_seqlens_q ? f.total_q : f.batch * f.seqlen_q);
}

size_t scratch_bytes(const FlashBwdParams& p) {
  if (tensor_cores(p)) return size_t(lse_rows(p)) * sizeof(float);
  if (!p.dbias) return 0;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  return size_t(pl.batches * pl.heads * p.fwd.seqlen_q * p.fwd.seqlen_k) * sizeof(float);
}

}  // namespace

engine::OpDef::Workspace FlashAttentionBackwardOp::cuda_workspace(const engine::Bound& b,
                                                                  const engine::PlanData& plan) const {
  const FlashBwdParams p = params(b);
  size_t bytes = scratch_bytes(p);
  // The dense mask's tile summary after delta (flash_mask_tiles_cuda.h).
  if (p.fwd.dense_mask != nullptr) {
    const auto& facts = plan.facts_as<FlashBwdPlanFacts>();
    bytes = mask_tiles_offset(bytes) + mask_tiles_bytes(p.fwd, facts.block_q, facts.block_k);
  }
  return {bytes, 0};
}

void FlashAttentionBackwardOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                           engine::CudaLaunchContext& lc) const {
  // Dropout keys take FlashBwdDropoutParams, which starts with FlashBwdParams; each launch copies
  // the size its kernel declares.
  FlashBwdDropoutParams full{};
  FlashBwdParams& p = full;
  p = params(b);
  if (flash_args::dropout_on(*this, b)) full.dropout = flash_args::dropout_params(*this, b);
  if (b.has(dbias) && !b.has(bias)) p.zero_dbias = b.data(dbias);
  if (b.has(dsoftmax_aux) && !b.has(softmax_aux)) p.zero_dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  void* args[] = {&full};  // copied at each launch
  if (!tensor_cores(p)) {
    p.phase = cuda::kBwdScalar;
    p.dbias_work = p.dbias ? static_cast<float*>(lc.scratch()) : nullptr;
    const int64_t tasks = flash_bwd_tasks(p, cuda::kFlashBwdBlock, cuda::kFlashBwdBlock).total();
    if (tasks == 0 && !p.zero_dbias && !p.zero_dsoftmax_aux) return;
    lc.launch(0, engine::Grid{flash_grid_x(name(), "task", std::max<int64_t>(tasks, 1)), 1, 1}, cuda::kFlashBwdBlock, 0, args);
    return;
  }
  const auto& facts = plan.facts_as<FlashBwdPlanFacts>();
  require_flash_bwd_rows(name(), p);
  const int64_t sinks = flash_bwd_tasks(p, facts.block_q, facts.block_k).sinks;
  if (p.fwd.dense_mask != nullptr)  // before the kernels that read it (stream order)
    launch_mask_tiles(lc, 1, p.fwd, facts.block_q, facts.block_k,
                      static_cast<unsigned char*>(lc.scratch()) + mask_tiles_offset(scratch_bytes(p)));
  launch_flash_bwd_tc(name(), p, args, {facts.block_q, facts.block_k, lse_rows(p), sinks, 0, 0, facts.wgmma}, lc);
}

}  // namespace ejk::ops
