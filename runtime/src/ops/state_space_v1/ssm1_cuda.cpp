// The CUDA launch plan of state_space_v1 (kernels/ejk/kernels/cuda/ssm1.cuh): one block per
// (sequence, tile of 128 channels); the backward's checkpoints and chunk states per channel,
// its per-tile dB/dC partials and per-sequence dA/dD shares in the stream's scratch, summed by a
// second launch. Built with CUDA only.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/state_space_v1/ssm1_op.h"

namespace ejk::ops {
namespace {

struct Ssm1Launch {
  Ssm1Params p;
  int64_t blocks = 0;
  size_t work_bytes = 0, partial_bytes = 0;
};

Ssm1Launch plan_launch(const Ssm1Op& op, const engine::Bound& b) {
  Ssm1Launch l{op.params(b)};
  Ssm1Params& p = l.p;
  p.tiles = ceil_div<int64_t>(p.dim, kSsm1Threads);
  l.blocks = p.batch * p.tiles;
  if (!op.backward) return l;
  const int64_t packs = ssm1_packs(p.cu_seqlens, p.batch);
  if (p.cu_seqlens == nullptr) {
    p.chunk = ssm1_chunk(p.seqlen);
    p.chunks_cap = ceil_div<int64_t>(p.seqlen, p.chunk);
  } else {
    // The device's cu_seqlens is never read back: checkpoints by token position cost
    // S / C + Bt slots per channel, chunk states C per unit, so C near the square root of
    // the mean length balances them (common/ssm1_params.h).
    p.chunk = ssm1_chunk(ceil_div<int64_t>(p.seqlen, std::max<int64_t>(p.batch, 1)));
    p.chunks_cap = ssm1_cuda_varlen_chunks_cap(p.seqlen, p.batch, p.chunk);
  }
  l.work_bytes = size_t(ssm1_cuda_work_floats(p.batch, p.dim, p.nstate, p.chunks_cap, p.chunk)) * sizeof(float);
  l.partial_bytes = size_t(ssm1_cuda_bc_floats(p.tiles, packs, p.seqlen, p.nstate) +
                           ssm1_share_floats(p.batch, p.dim, p.nstate)) * sizeof(float);
  return l;
}

}  // namespace

engine::OpDef::Workspace Ssm1Op::cuda_workspace(const engine::Bound& b, const engine::PlanData&) const {
  const Ssm1Launch l = plan_launch(*this, b);
  return {l.work_bytes + l.partial_bytes, 0};
}

void Ssm1Op::cuda_launch(const engine::Bound& b, const engine::PlanData&, engine::CudaLaunchContext& lc) const {
  Ssm1Launch l = plan_launch(*this, b);
  if (l.blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, channel tile) blocks exceed the grid", name(), l.blocks));
  void* args[] = {&l.p};  // copied at each launch
  if (!backward) {
    if (l.blocks > 0) lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kSsm1Threads, 0, args);
    return;
  }
  l.p.work = static_cast<float*>(lc.scratch());
  l.p.partial = l.p.work + l.work_bytes / sizeof(float);
  // With no sequences the sweep writes no shares, and the sums must still come out zero.
  if (l.blocks > 0) lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kSsm1Threads, 0, args);
  const int64_t elems =
      ssm1_packs(l.p.cu_seqlens, l.p.batch) * l.p.seqlen * 2 * l.p.nstate + l.p.dim * (l.p.nstate + 1);
  if (elems == 0) return;
  l.p.phase = 1;
  lc.launch(0, engine::Grid{unsigned(ceil_div<int64_t>(elems, kSsm1Threads)), 1, 1}, kSsm1Threads, 0, args);
}

}  // namespace ejk::ops
