// recurrent_attention and recurrent_attention_backward through the engine. One OpDef class
// serves both: it adds the checks the specs cannot state, fills RecurrentParams (one function
// for the CPU, CUDA and the reference), plans the CPU tasks and the CUDA launches, and runs the
// float64 reference.
#pragma once
#include "ejk/kernels/common/recurrent_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

// What a plan's key says, read once (OpDef::plan_facts): the CUDA forward's kernel.
struct RecurrentFacts {
  bool chunked = false;  // recurrent_chunked(): the tensor-core chunked forward or backward
};

class RecurrentOp final : public engine::OpDef {
 public:
  RecurrentOp(std::string_view kernel_op, bool backward);

  void check(const engine::Bound& b) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  // Whether a key runs the chunked CUDA kernel (the template asks recurrent_chunked() too).
  bool chunked(const VariantKey& key) const;
  // Every field but the work split and the workspace.
  RecurrentParams params(const engine::Bound& b) const;

  const bool backward;
  // Spec indices, resolved once; the backward's own are -1 in the forward and the forward's
  // outputs -1 in the backward.
  const int q, k, v, g, g_gamma, gk, gv, initial_state, cu_seqlens;
  const int g_head;
  const int o, final_state;
  const int d_o, d_final_state, dq, dk, dv, dg, dgk, dgv, d_initial_state;
  const int softmax_scale, reverse;
  const int sym_B, sym_T, sym_H, sym_K, sym_V, sym_N;
};

const RecurrentOp& recurrent_attention_op();
const RecurrentOp& recurrent_attention_backward_op();

// Tokens between the backward's checkpoints for a longest sequence of `longest` tokens: about
// sqrt(longest), so checkpoints and one chunk's states cost about the same.
int64_t recurrent_chunk(int64_t longest);

}  // namespace ejk::ops
