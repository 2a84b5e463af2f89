// state_space_v2 and state_space_v2_backward through the engine. One OpDef class serves both:
// it adds the checks the specs cannot state, fills Ssm2Params (one function for the CPU, CUDA
// and the reference), plans the CPU tasks and the CUDA launches, and runs the float64 reference.
#pragma once
#include "ejk/kernels/common/ssm2_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

// What a plan's key says, read once (OpDef::plan_facts): the CUDA kernel.
struct Ssm2Facts {
  bool chunked = false;  // ssm2_chunked(): chunked SSD on tensor cores
};

class Ssm2Op final : public engine::OpDef {
 public:
  Ssm2Op(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  // Whether a key runs chunked SSD on CUDA, forward or backward (ssm2_chunked()).
  bool chunked(const VariantKey& key) const;
  // Every field but the work split and the workspace.
  Ssm2Params params(const engine::Bound& b) const;
  // Tokens of the longest sequence: S dense; varlen, from the host's cu_seqlens (checked).
  int64_t longest(const engine::Bound& b) const;

  const bool backward;
  const int x, A, B, C, D, dt, initial_state, cu_seqlens;
  const int y, final_state;
  const int d_y, d_final_state, dx, dA, dB, dC, dD, ddt, d_initial_state;
  const int sym_B, sym_S, sym_H, sym_P, sym_G, sym_N;
};

const Ssm2Op& state_space_v2_op();
const Ssm2Op& state_space_v2_backward_op();

}  // namespace ejk::ops
