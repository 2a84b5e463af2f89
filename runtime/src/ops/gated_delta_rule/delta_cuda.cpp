// The CUDA launch plan of the gated delta rule. Token walk (kernels/ejk/kernels/cuda/delta.cuh
// and delta_bwd.cuh): one block per (sequence, head, tile of 32 state columns); the backward's
// checkpoints and chunk states per block, and its partial sums per tile, in the stream's
// scratch, then a second launch with a warp per (token, head). Chunked forward (delta_chunk.cuh):
// a block per (sequence, head, chunk) writes the chunk's solved operands to the scratch, then a
// block per (sequence, head, 32 state columns) walks the chunks. Built with CUDA only.
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
  int64_t blocks = 0;       // of the token walk, or of the chunked form's walk over chunks
  int64_t chunk_units = 0;  // chunked: (sequence, head, chunk) blocks of the per-chunk pass
  size_t work_bytes = 0, partial_bytes = 0;
};

DeltaLaunch plan_launch(const DeltaOp& op, const engine::Bound& b, const DeltaFacts& f) {
  DeltaLaunch l{op.params(b)};
  DeltaParams& p = l.p;
  if (f.chunk > 1) {
    p.chunks = ceil_div<int64_t>(p.seqlen, kDeltaChunk);
    l.chunk_units = p.sequences * p.heads * p.chunks;
    l.blocks = p.sequences * p.heads * (p.dv_ / kDeltaChunkCols);
    l.work_bytes = size_t(delta_chunk_work_bytes(l.chunk_units, p.dk_, p.dv_));
    return l;
  }
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

void check_grid(const DeltaOp& op, int64_t blocks, const char* what) {
  if (blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} {} blocks exceed the grid", op.name(), blocks, what));
}

// The chunked form: the per-chunk pass, then the walk over chunks (a second launch of the same
// kernel, params.phase 1), each with its shared memory.
void launch_chunked(const DeltaOp& op, DeltaLaunch& l, engine::CudaLaunchContext& lc) {
  check_grid(op, l.chunk_units, "(sequence, head, chunk)");
  DeltaParams& p = l.p;
  p.work = static_cast<float*>(lc.scratch());
  void* args[] = {&p};  // copied at each launch
  p.phase = 0;
  lc.launch(0, engine::Grid{unsigned(l.chunk_units), 1, 1}, kDeltaThreads,
            unsigned(delta_chunk_prep_smem(p.dk_, p.dv_)), args);
  p.phase = 1;
  lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kDeltaThreads, unsigned(delta_chunk_walk_smem(p.dk_)), args);
}

}  // namespace

engine::OpDef::Workspace DeltaOp::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  const DeltaLaunch l = plan_launch(*this, b, plan.facts_as<DeltaFacts>());
  return {l.work_bytes + l.partial_bytes, 0};
}

void DeltaOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const {
  DeltaLaunch l = plan_launch(*this, b, plan.facts_as<DeltaFacts>());
  if (l.blocks == 0) return;
  check_grid(*this, l.blocks, "(sequence, head, column tile)");
  if (plan.facts_as<DeltaFacts>().chunk > 1) return launch_chunked(*this, l, lc);
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
