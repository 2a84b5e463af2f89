// page_attention through the engine: the checks its spec cannot state (GQA divisibility, the
// host-resident context lengths and page tables), PageAttentionParams from the bound arguments
// (one function for the CPU, CUDA and the reference), CPU tasks, the CUDA launch with its
// split-KV combine, and the float64 reference.
#pragma once
#include "ejk/kernels/common/page_attention_params.h"
#include "engine/op_def.h"

namespace ejk::ops {

// What the plan's key says, read once (OpDef::plan_facts).
struct PageFacts {
  bool split = false;
};

class PageAttentionOp final : public engine::OpDef {
 public:
  PageAttentionOp();

  void check(const engine::Bound& b) const override;
  void problem(const engine::Bound& b, engine::ProblemValues& v) const override;
  std::vector<VariantKey> companions(const VariantKey& key) const override;
  void plan_facts(const engine::PlanData& plan, void* facts) const override;
  engine::CpuWork cpu_prepare(const engine::Bound& b, const engine::PlanData& plan, void* params) const override;
  void cuda_launch(const engine::Bound& b, const engine::PlanData& plan, engine::CudaLaunchContext& lc) const override;
  Workspace cuda_workspace(const engine::Bound& b, const engine::PlanData& plan) const override;
  int64_t cuda_dynamic_smem(const VariantKey& key) const override;
  double flops(const engine::Bound& b) const override;
  void reference(const engine::Bound& b, double* const* out) const override;

  // Every field but the CUDA split and workspace.
  PageAttentionParams params(const engine::Bound& b) const;
  // The longest context a call allows: max_context_len, else the tables' capacity MB * BS.
  int64_t kv_tokens(const engine::Bound& b) const;

  // Spec indices, resolved once.
  const int query, key_cache, value_cache, context_lens, block_tables, out;
  const int attn_scale, softcap, sliding_window, max_context_len, num_splits;
  const int sym_S, sym_Hq, sym_D, sym_NB, sym_Hkv, sym_BS, sym_MB;
  const int pv_units, pv_kv_tokens, pv_requested_splits;
};

const PageAttentionOp& page_attention_op();

}  // namespace ejk::ops
