// The CUDA launches of nsa_selection_attention and its backward, with the CUDA build: one warp
// per row task for the forward (kernels/ejk/kernels/cuda/nsa_fwd.cuh); for the backward
// (nsa_bwd.cuh) the dq launch, which also writes the delta rows into the stream's scratch, then
// the dk/dv launch, in stream order. The indices are read on the device; nothing is planned or
// copied on the host.
#include <fmt/format.h>

#include <climits>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/cuda_exec.h"
#include "ops/nsa_selection_attention/nsa_op.h"

namespace ejk::ops {
namespace {

unsigned grid_x(std::string_view op, int64_t tasks, const char* what) {
  if (tasks > INT_MAX)
    throw InvalidArgument(fmt::format("{}: {} {} tasks exceed the CUDA grid's {}", op, tasks, what, INT_MAX));
  return unsigned(tasks);
}

}  // namespace

int64_t NsaSelectionOp::cuda_dynamic_smem(const VariantKey& key) const {
  const int64_t d = key.get_int("head_dim");
  return backward ? nsa_bwd_cuda_smem(d) : nsa_fwd_smem(d);
}

engine::OpDef::Workspace NsaSelectionOp::cuda_workspace(const engine::Bound& b, const engine::PlanData&) const {
  if (!backward) return {};
  // delta: one f32 per (sequence, token, query head).
  return {size_t(b.size(sym_B) * b.size(sym_T) * b.size(sym_Hq)) * sizeof(float), 0};
}

void NsaSelectionOp::cuda_launch(const engine::Bound& b, const engine::PlanData& plan,
                                 engine::CudaLaunchContext& lc) const {
  const int64_t d = plan.key.get_int("head_dim");
  if (!backward) {
    NsaParams p = params(b);
    const int64_t tasks = nsa_row_tasks(p);
    if (tasks == 0) return;
    void* args[] = {&p};
    lc.launch(0, engine::Grid{grid_x(name(), tasks, "(token, kv head, head chunk)"), 1, 1}, kNsaWarpThreads,
              unsigned(nsa_fwd_smem(d)), args);
    return;
  }
  NsaBwdCudaParams a{params(b), static_cast<float*>(lc.scratch()), kNsaBwdDq};
  // Both always: without query heads the dq grid is empty and the dk/dv launch writes zeros.
  const unsigned dq_grid = grid_x(name(), nsa_row_tasks(a.p), "(token, kv head, head chunk)");
  const unsigned kv_grid = grid_x(name(), nsa_key_tasks(a.p), "(kv head, key tile)");
  void* args[] = {&a};  // copied at each launch
  lc.launch(0, engine::Grid{dq_grid, 1, 1}, kNsaWarpThreads, unsigned(nsa_bwd_dq_smem(d)), args);
  a.phase = kNsaBwdKv;
  lc.launch(0, engine::Grid{kv_grid, 1, 1}, kNsaBwdKvThreads, unsigned(nsa_bwd_kv_smem(d)), args);
}

}  // namespace ejk::ops
