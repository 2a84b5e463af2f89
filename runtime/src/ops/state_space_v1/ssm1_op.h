// state_space_v1 and state_space_v1_backward through the engine. One OpDef class serves both:
// it adds the checks the specs cannot state, fills Ssm1Params (one function for the CPU, CUDA
// and the reference), plans the CPU tasks and the CUDA launches, and runs the float64 reference.
#pragma once
#include "ejk/kernels/common/ssm1_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class Ssm1Op final : public engine::OpDef {
 public:
  Ssm1Op(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the work split and the workspace.
  Ssm1Params params(const engine::Bound& b) const;
  // Tokens of the longest sequence: S dense; varlen, from the host's cu_seqlens (checked).
  int64_t longest(const engine::Bound& b) const;

  const bool backward;
  // Spec indices, resolved once; the backward's own are -1 in the forward and the forward's
  // outputs -1 in the backward.
  const int x, A, B, C, D, dt, gate, initial_state, cu_seqlens;
  const int y, final_state;
  const int d_y, d_final_state, dx, dA, dB, dC, dD, ddt, dgate, d_initial_state;
  const int sym_B, sym_S, sym_D, sym_N;
};

const Ssm1Op& state_space_v1_op();
const Ssm1Op& state_space_v1_backward_op();

// Tokens between the backward's checkpoints for a sequence of `seqlen` tokens: about
// sqrt(seqlen), so checkpoints and one chunk's states cost about the same.
int64_t ssm1_chunk(int64_t seqlen);

}  // namespace ejk::ops
