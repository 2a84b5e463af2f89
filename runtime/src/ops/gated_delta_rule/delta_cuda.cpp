// The CUDA launch plan of the gated delta rule (kernels/ejk/kernels/cuda/delta.cuh and
// delta_bwd.cuh): one block per (sequence, head, tile of 32 state columns); the backward's
// checkpoints and chunk states per block, and its partial sums per tile, in the stream's
// scratch, then a second launch with a warp per (token, head). Built with CUDA only.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/gated_delta_rule/delta_op.h"

namespace ejk::ops {
namespace {

struct DeltaLaunch {
  DeltaParams p;
  int64_t blocks = 0;
  size_t work_bytes = 0, partial_bytes = 0;
};

DeltaLaunch plan_launch(const DeltaOp& op, const engine::Bound& b) {
  DeltaLaunch l{op.params(b)};
  DeltaParams& p = l.p;
  p.v_tile = kDeltaTile, p.v_tiles = ceil_div<int64_t>(p.dv_, p.v_tile);
  l.blocks = p.sequences * p.heads * p.v_tiles;
  if (!op.backward) return l;
  p.chunk = delta_chunk(p.seqlen);
  p.chunks_cap = ceil_div<int64_t>(p.seqlen, p.chunk);
  l.work_bytes = size_t(l.blocks * delta_cuda_block_floats(p.dk_, p.chunks_cap, p.chunk)) * sizeof(float);
  l.partial_bytes =
      size_t(p.v_tiles * p.sequences * p.seqlen * p.heads * delta_cuda_partial_floats(p.dk_)) * sizeof(float);
  return l;
}

}  // namespace

engine::OpDef::Workspace DeltaOp::cuda_workspace(const engine::Bound& b, const engine::PlanData&) const {
  const DeltaLaunch l = plan_launch(*this, b);
  return {l.work_bytes + l.partial_bytes, 0};
}

void DeltaOp::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  DeltaLaunch l = plan_launch(*this, b);
  if (l.blocks == 0) return;
  if (l.blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, head, column tile) blocks exceed the grid", name(), l.blocks));
  void* args[] = {&l.p};  // copied at each launch
  if (!backward) {
    lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kDeltaThreads, 0, args);
    return;
  }
  l.p.work = static_cast<float*>(lc.scratch());
  l.p.partial = l.p.work + l.work_bytes / sizeof(float);
  lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kDeltaThreads, 0, args);
  const int64_t pairs = l.p.sequences * l.p.seqlen * l.p.heads;  // phase 1: a warp per (token, head)
  if (pairs == 0) return;
  l.p.phase = 1;
  lc.launch(0, engine::Grid{unsigned(ceil_div<int64_t>(pairs, kDeltaWarps)), 1, 1}, kDeltaThreads, 0, args);
}

}  // namespace ejk::ops
