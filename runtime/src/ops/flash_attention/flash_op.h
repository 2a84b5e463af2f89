// flash_attention through the engine: the checks its spec cannot state, its problem variables,
// FlashFwdParams from the bound arguments (one function for the CPU, CUDA and the reference),
// and its CPU and CUDA execution.
#pragma once
#include "engine/op_def.h"
#include "ejk/kernels/common/flash_params.h"

namespace ejk::ops {

// The tile facts of a CUDA key: its family (`wgmma`: the sm90a family, for targets whose spec
// var `sm` is 90 or more), head_dim, blocks, and its .items, .bias and .dmask flags.
struct FlashKeyFacts {
  bool wgmma = false, per_item = false, bias = false, dense_mask = false;
  int64_t head_dim = 0, block_q = 0, block_k = 0;
};

// What a plan's key says, read once (OpDef::plan_facts): block_q, and a CUDA key's tile facts.
struct FlashPlanFacts {
  int64_t block_q = 0;
  FlashKeyFacts cuda;
};

class FlashAttentionOp final : public engine::OpDef {
 public:
  FlashAttentionOp();

  void check(const engine::Bound& b) const override;
  void problem(const engine::Bound& b, engine::ProblemValues& v) const override;
  std::vector<VariantKey> companions(const VariantKey& key) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
#if EJK_HAVE_CUDA
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
#endif
  void reference(const engine::Bound& b, double* const* out) const override;
  double flops(const engine::Bound& b) const override;

  // Every field of the kernels' parameters but tile_counter and l2_kv_bytes.
  FlashFwdParams params(const engine::Bound& b) const;

  // Spec indices, resolved once.
  const int q, k, v, bias, attention_mask, q_segment_ids, kv_segment_ids, cum_seqlens_q, cum_seqlens_k, softmax_aux, out, lse;
  const int softmax_scale, causal, sliding_window, logits_soft_cap, normalize_output, max_seqlen_q, max_seqlen_k;
  const int dropout_prob, dropout_seed;
  const int sym_D, sym_Hq, sym_Hkv, sym_B, sym_Sq, sym_Sk, sym_N, sym_Tq, sym_Tk, sym_S;
  const int pv_seqlen_q, pv_seqlen_k;
};

const FlashAttentionOp& flash_attention_op();

// The dense mask's tile summary (a companion of every CUDA dense-mask key of both flash ops) for a target.
VariantKey flash_mask_tiles_key(const std::string& target);

}  // namespace ejk::ops
