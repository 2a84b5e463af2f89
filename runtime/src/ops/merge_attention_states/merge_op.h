// merge_attention_states through the engine: MergeStatesParams from the bound arguments (the
// leading dims flattened where every tensor's strides allow), CPU tasks, the CUDA launch and the
// float64 reference.
#pragma once
#include "ejk/kernels/common/merge_states_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class MergeAttentionStatesOp final : public engine::OpDef {
 public:
  MergeAttentionStatesOp();

  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
#endif
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the backend's schedule (rows_per_task, lanes_per_row, vec_elems).
  MergeStatesParams params(const engine::Bound& b) const;

  // Spec indices, resolved once.
  const int out_a, lse_a, out_b, lse_b, out, lse;
  const int sym_T, sym_H, sym_D;
};

const MergeAttentionStatesOp& merge_attention_states_op();

}  // namespace ejk::ops
