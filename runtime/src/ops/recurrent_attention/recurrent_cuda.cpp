// The CUDA launch plan of recurrent attention (kernels/ejk/kernels/cuda/recurrent.cuh, and
// recurrent_chunk.cuh / recurrent_chunk_bwd.cuh for the keys recurrent_chunked() names): one
// block per (sequence, head, tile of 32 state columns); the backward's checkpoints (and the
// token kernel's chunk states per block), and its partial row sums per tile, in the stream's
// scratch. Built with CUDA only.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/recurrent_attention/recurrent_op.h"

namespace ejk::ops {
namespace {

struct RecurrentLaunch {
  RecurrentParams p;
  int64_t blocks = 0;
  size_t work_bytes = 0, partial_bytes = 0;
};

// The device's cu_seqlens is never read back: the workspace depends on the packed total only.
RecurrentLaunch plan_launch(const RecurrentOp& op, const engine::Bound& b, bool chunked) {
  RecurrentLaunch l{op.params(b)};
  RecurrentParams& p = l.p;
  p.v_tile = kRecurrentTile, p.v_tiles = ceil_div<int64_t>(p.dv_, p.v_tile);
  l.blocks = p.sequences * p.heads * p.v_tiles;
  if (!op.backward) return l;
  if (chunked) {
    // The chunked kernel's states at every 64-step chunk boundary, per (head, column tile).
    p.chunk = kLinearChunk;
    l.work_bytes = size_t(p.heads * p.v_tiles * linear_chunk_bwd_slots(p.total, p.sequences) * p.dk_ *
                          kLinearChunkCols) * sizeof(float);
  } else {
    // Checkpoints cost total / C tiles per (head, column tile), chunk states C per block: C near
    // the square root of the mean sequence length balances them.
    p.chunk = recurrent_chunk(ceil_div<int64_t>(p.total, std::max<int64_t>(p.sequences, 1)));
    l.work_bytes = size_t(recurrent_cuda_work_tiles(p.total, p.sequences, p.heads, p.v_tiles, p.chunk) * p.dk_ *
                          kRecurrentTile) * sizeof(float);
  }
  l.partial_bytes = size_t(p.v_tiles * p.total * p.heads * 3 * p.dk_) * sizeof(float);
  return l;
}

}  // namespace

engine::OpDef::Workspace RecurrentOp::cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const {
  const RecurrentLaunch l = plan_launch(*this, b, plan.facts_as<RecurrentFacts>().chunked);
  return {l.work_bytes + l.partial_bytes, 0};
}

void RecurrentOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                              engine::CudaLaunchContext& lc) const {
  const bool chunked = plan.facts_as<RecurrentFacts>().chunked;
  RecurrentLaunch l = plan_launch(*this, b, chunked);
  if (l.blocks == 0) return;
  if (l.blocks > INT32_MAX)
    throw InvalidArgument(fmt::format("{}: {} (sequence, head, column tile) blocks exceed the grid", name(), l.blocks));
  void* args[] = {&l.p};  // copied at each launch
  if (!backward && chunked) {
    lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kRecurrentChunkThreads,
              unsigned(recurrent_chunk_smem_bytes(l.p.dk_)), args);
    return;
  }
  if (!backward) {
    lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, kRecurrentThreads, 0, args);
    return;
  }
  l.p.work = static_cast<float*>(lc.scratch());
  l.p.partial = l.p.work + l.work_bytes / sizeof(float);
  // Both phases run at the key's block size (its __launch_bounds__).
  const unsigned threads = chunked ? kRecurrentChunkThreads : kRecurrentThreads;
  lc.launch(0, engine::Grid{unsigned(l.blocks), 1, 1}, threads,
            chunked ? unsigned(linear_chunk_bwd_smem_bytes(l.p.dk_)) : 0u, args);
  const int64_t rows = l.p.total * l.p.heads * l.p.dk_;  // phase 1: a thread per (token, head, row)
  if (rows == 0) return;
  l.p.phase = 1;
  lc.launch(0, engine::Grid{unsigned(ceil_div<int64_t>(rows, threads)), 1, 1}, threads, 0, args);
}

}  // namespace ejk::ops
