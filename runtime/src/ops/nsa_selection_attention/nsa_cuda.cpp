// The CUDA launch of nsa_selection_attention, with the CUDA build: one warp per row task
// (kernels/ejk/kernels/cuda/nsa_fwd.cuh), the indices read on the device; nothing is planned or
// copied on the host.
#include <fmt/format.h>

#include <climits>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/nsa_selection_attention/nsa_op.h"

namespace ejk::ops {

int64_t NsaSelectionOp::cuda_dynamic_smem(const VariantKey& key) const {
  return backward ? 0 : nsa_fwd_smem(key.get_int("head_dim"));
}

void NsaSelectionOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                 engine::CudaLaunchContext& lc) const {
  if (backward)
    throw BackendUnavailable(fmt::format("{}: no CUDA kernel (the backward runs on the CPU)", name()));
  NsaParams p = params(b);
  const int64_t tasks = nsa_row_tasks(p);
  if (tasks == 0) return;
  if (tasks > INT_MAX)
    throw InvalidArgument(fmt::format("{}: {} (token, kv head, head chunk) tasks exceed the CUDA grid's {}", name(),
                                      tasks, INT_MAX));
  void* args[] = {&p};
  lc.launch(0, engine::Grid{unsigned(tasks), 1, 1}, kNsaWarpThreads,
            unsigned(nsa_fwd_smem(plan.key.get_int("head_dim"))), args);
}

}  // namespace ejk::ops
