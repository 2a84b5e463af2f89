// The CUDA launch plan of state_space_v2: the forward of the keys ssm2_chunked() names runs
// chunked SSD (kernels/ejk/kernels/cuda/ssm2_chunk.cuh), one block per (sequence, head, tile of
// 32 head dims); the others the scan (cuda/ssm2.cuh), one block per (sequence, head, tile of
// kSsm1Threads head dims); the backward's checkpoints and chunk states per head dim and its f32
// accumulators in the stream's scratch: a launch zeroes them, the sweep adds to
// them, a last launch writes them out. The chunked keys' backward (cuda/ssm2_chunk_bwd.cuh):
// chunk-boundary states and partial sums in the scratch, three launches of 128 threads (the
// chunk loop, the sums per token, the sums per head). Built with CUDA only.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/state_space_v1/ssm1_op.h"
#include "ops/state_space_v2/ssm2_op.h"

namespace ejk::ops {
namespace {

struct Ssm2Launch {
  Ssm2Params p;
  int64_t blocks = 0, acc = 0;
  size_t work_bytes = 0;
};

Ssm2Launch plan_launch(const Ssm2Op& op, const engine::Bound& b, bool chunked) {
  Ssm2Launch l{op.params(b)};
  Ssm2Params& p = l.p;
  p.tiles = ceil_div<int64_t>(p.hdim, kSsm1Threads);
  l.blocks = p.batch * p.heads * p.tiles;
  if (!op.backward) return l;
  if (chunked) {
    const int64_t rows = ssm1_packs(p.cu_seqlens, p.batch) * p.seqlen;
    l.work_bytes = size_t(ssm2_chunk_work_floats(rows, p.batch, p.heads, p.hdim, p.nstate)) * sizeof(float);
    return l;
  }
  if (p.cu_seqlens == nullptr) {
    p.chunk = ssm1_chunk(p.seqlen);
    p.chunks_cap = ceil_div<int64_t>(p.seqlen, p.chunk);
  } else {
    // The device's cu_seqlens is never read back: checkpoints by token position, C near the
    // square root of the mean length (as Mamba-1's plan, ssm1_cuda.cpp).
    p.chunk = ssm1_chunk(ceil_div<int64_t>(p.seqlen, std::max<int64_t>(p.batch, 1)));
    p.chunks_cap = ssm1_cuda_varlen_chunks_cap(p.seqlen, p.batch, p.chunk);
  }
  l.work_bytes = size_t(ssm2_cuda_work_floats(p.batch, p.heads, p.hdim, p.nstate, p.chunks_cap, p.chunk)) * sizeof(float);
  l.acc = ssm2_cuda_acc_floats(ssm1_packs(p.cu_seqlens, p.batch), p.seqlen, p.heads, p.groups, p.nstate);
  return l;
}

}  // namespace

engine::OpDef::Workspace Ssm2Op::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  const Ssm2Launch l = plan_launch(*this, b, plan.facts_as<Ssm2Facts>().chunked);
  return {l.work_bytes + size_t(l.acc) * sizeof(float), 0};
}

namespace {

// The chunked backward's three phases (ssm2_chunk_bwd.cuh), in order on the stream.
void launch_chunked_bwd(const std::string& name, Ssm2Launch& l, engine::CudaLaunchContext& lc) {
  Ssm2Params& p = l.p;
  const int64_t rows = ssm1_packs(p.cu_seqlens, p.batch) * p.seqlen;
  p.work = static_cast<float*>(lc.scratch());
  void* args[] = {&p};  // copied at each launch
  for (i32 phase = 1; phase <= 3; ++phase) {
    const int64_t blocks = ssm2_chunk_bwd_blocks(phase, p.batch, rows, p.heads, p.groups, p.hdim, p.nstate);
    if (blocks > INT32_MAX)
      throw InvalidArgument(fmt::format("{}: {} blocks of the backward's phase {} exceed the grid", name, blocks, phase));
    p.phase = phase;
    if (blocks > 0)
      lc.launch(0, engine::Grid{unsigned(blocks), 1, 1}, kLinearChunkThreads, unsigned(ssm2_chunk_bwd_smem(phase, p.nstate)),
                args);
  }
}

}  // namespace

void Ssm2Op::cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const {
  const bool chunked = plan.facts_as<Ssm2Facts>().chunked;
  Ssm2Launch l = plan_launch(*this, b, chunked);
  if (backward && chunked) return launch_chunked_bwd(name(), l, lc);
  if (!backward && chunked) {
    const int64_t blocks = l.p.batch * l.p.heads * ceil_div<int64_t>(l.p.hdim, kLinearChunkCols);
    if (blocks > INT32_MAX)
      throw InvalidArgument(fmt::format("{}: {} (sequence, head, head-dim tile) blocks exceed the grid", name(), blocks));
    void* args[] = {&l.p};
    if (blocks > 0)
      lc.launch(0, engine::Grid{unsigned(blocks), 1, 1}, kLinearChunkThreads,
                unsigned(linear_chunk_smem_bytes(l.p.nstate)), args);
    return;
  }
  if (l.blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, head, head-dim tile) blocks exceed the grid", name(), l.blocks));
  void* args[] = {&l.p};  // copied at each launch
  if (!backward) {
    if (l.blocks > 0) lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kSsm1Threads, 0, args);
    return;
  }
  if (l.acc == 0) return;  // no heads: nothing to write
  l.p.work = static_cast<float*>(lc.scratch());
  l.p.partial = l.p.work + l.work_bytes / sizeof(float);
  const engine::Grid elementwise{unsigned(ceil_div<int64_t>(l.acc, kSsm1Threads)), 1, 1};
  l.p.phase = 0;
  lc.launch(0, elementwise, kSsm1Threads, 0, args);
  l.p.phase = 1;
  if (l.blocks > 0) lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kSsm1Threads, 0, args);
  l.p.phase = 2;
  lc.launch(0, elementwise, kSsm1Threads, 0, args);
}

}  // namespace ejk::ops
