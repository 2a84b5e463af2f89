// mean_pooling and mean_pooling_backward through the engine. One OpDef class serves both: the
// forward reads `tokens` (x) and writes `rows` (out), the backward reads rows (g) and writes
// tokens (dx). It adds the checks the specs cannot state, fills MeanPoolParams (one function
// for the CPU, CUDA and the reference) and plans the CPU tasks and the CUDA launches.
#pragma once
#include "ejk/kernels/common/mean_pooling_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class MeanPoolingOp final : public engine::OpDef {
 public:
  MeanPoolingOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
#endif
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the work split (chunks, tiles) and the workspace.
  MeanPoolParams params(const engine::Bound& b) const;

  const bool backward;
  // Spec indices, resolved once: tokens is x or dx, rows is out or g.
  const int tokens, rows, cu_seqlens, num_tokens;  // num_tokens: -1 in the forward
  const int input, output;
  const int sym_B, sym_T, sym_D, sym_N;
};

const MeanPoolingOp& mean_pooling_op();
const MeanPoolingOp& mean_pooling_backward_op();

}  // namespace ejk::ops
