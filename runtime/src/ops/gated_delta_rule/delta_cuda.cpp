// The CUDA launch plan of the gated delta rule's forward (kernels/ejk/kernels/cuda/delta.cuh):
// one block per (sequence, head, tile of 32 state columns), no workspace. Built with CUDA only.
#include <fmt/format.h>

#include <cstdint>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/gated_delta_rule/delta_op.h"

namespace ejk::ops {

void DeltaOp::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  if (backward)
    throw BackendUnavailable(fmt::format("{}: there is no CUDA kernel for the backward (the CPU has one)", name()));
  DeltaParams p = params(b);
  p.v_tile = kDeltaTile, p.v_tiles = ceil_div<int64_t>(p.dv_, p.v_tile);
  const int64_t blocks = p.sequences * p.heads * p.v_tiles;
  if (blocks == 0) return;
  if (blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, head, column tile) blocks exceed the grid", name(), blocks));
  void* args[] = {&p};  // copied at the launch
  lc.launch(0, engine::Grid{unsigned(blocks), 1, 1}, kDeltaThreads, 0, args);
}

}  // namespace ejk::ops
