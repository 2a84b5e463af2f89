// flash_attention_backward through the engine: the checks its spec cannot state, its problem
// variables, FlashBwdParams from the bound arguments (one function for the CPU, CUDA and the
// reference), the CPU task split and the float64 reference.
#pragma once
#include "ejk/kernels/common/flash_bwd_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

class FlashAttentionBackwardOp final : public engine::OpDef {
 public:
  FlashAttentionBackwardOp();

  void check(const engine::Bound& b) const override;
  void problem(const engine::Bound& b, engine::ProblemValues& v) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  std::vector<VariantKey> companions(const VariantKey& key) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  void reference(const engine::Bound& b, double* const* out) const override;
  double flops(const engine::Bound& b) const override;

  // Every field but the CPU's dbias workspace.
  FlashBwdParams params(const engine::Bound& b) const;

  const int q, k, v, bias, attention_mask, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux, out, lse, d_out, d_lse;
  const int dq, dk, dv, dbias, dsoftmax_aux;
  const int softmax_scale, causal, sliding_window, logits_soft_cap, normalize_output, max_seqlen_q, max_seqlen_k;
  const int dropout_prob, dropout_seed;
  const int sym_D, sym_Hq, sym_Hkv, sym_B, sym_Sq, sym_Sk, sym_N, sym_Tq, sym_Tk, sym_S;
  const int pv_seqlen_q, pv_seqlen_k;
};

// What a plan's key says, read once: its blocks, and whether it runs the sm90a wgmma kernels.
struct FlashBwdPlanFacts {
  int64_t block_q = 0, block_k = 0;
  bool wgmma = false;
};

const FlashAttentionBackwardOp& flash_attention_backward_op();

}  // namespace ejk::ops
