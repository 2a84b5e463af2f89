// grouped_matmul and grouped_matmul_backward through the engine. One OpDef class serves both:
// it adds the checks the specs cannot state (G <= GS, one of rhs and rhs_t, host-resident
// group sizes and offset), fills GroupedMatmulParams (one function for the CPU, CUDA and the
// reference), plans the CPU tasks and the CUDA launches, and runs the float64 reference.
#pragma once
#include "ejk/kernels/common/grouped_matmul_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class GroupedMatmulOp final : public engine::OpDef {
 public:
  GroupedMatmulOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
#endif
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the work split.
  GroupedMatmulParams params(const engine::Bound& b) const;

  const bool backward;
  // Spec indices, resolved once; the forward's own are -1 in the backward and the backward's
  // -1 in the forward.
  const int lhs, rhs, rhs_t, group_sizes, group_offset;
  const int existing_out, out;
  const int d_out, dlhs, drhs;
  const int sym_M, sym_K, sym_N, sym_G, sym_GS;
};

const GroupedMatmulOp& grouped_matmul_op();
const GroupedMatmulOp& grouped_matmul_backward_op();

}  // namespace ejk::ops
