// gated_delta_rule and gated_delta_rule_backward through the engine. One OpDef class serves
// both: it fills DeltaParams (one function for the CPU, CUDA and the reference), plans the CPU
// tasks and the CUDA launches, and runs the float64 reference.
#pragma once
#include "ejk/kernels/common/delta_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class DeltaOp final : public engine::OpDef {
 public:
  DeltaOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  void problem(const engine::Bound& b, engine::ProblemValues& v) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the work split and the workspace.
  DeltaParams params(const engine::Bound& b) const;

  const bool backward;
  // Spec indices, resolved once; the backward's own are -1 in the forward and the forward's
  // outputs -1 in the backward.
  const int q, k, v, beta, decay, seg_ids, initial_state;
  const int o, final_state;
  const int d_o, d_final_state, dq, dk, dv, dbeta, ddecay, d_initial_state;
  const int softmax_scale, use_qk_l2norm;
  const int sym_B, sym_T, sym_H, sym_K, sym_V;
  const int pv_seqlen;  // the forward's only
};

// What a plan's key decides: the forward's tokens per chunk (1: the token walk; the backward
// always walks tokens).
struct DeltaFacts {
  int64_t chunk = 1;
};

// Tokens between the backward's checkpoints: about sqrt(T), so checkpoints and one chunk's
// states cost about the same.
int64_t delta_chunk(int64_t seqlen);

const DeltaOp& gated_delta_rule_op();
const DeltaOp& gated_delta_rule_backward_op();

}  // namespace ejk::ops
