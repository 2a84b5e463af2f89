#include "ops/flash_attention/flash_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/metadata.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/cpu_kv_staging.h"
#include "ops/flash_attention/flash_reference.h"
#include "registry.h"

#if EJK_HAVE_CUDA
#include "ops/flash_attention/flash_cuda.h"
#endif

namespace ejk::ops {

FlashAttentionOp::FlashAttentionOp()
    : OpDef("flash_fwd"),
      q(tensor("q")), k(tensor("k")), v(tensor("v")), bias(tensor("bias")), attention_mask(tensor("attention_mask")),
      q_segment_ids(tensor("q_segment_ids")),
      kv_segment_ids(tensor("kv_segment_ids")), cum_seqlens_q(tensor("cum_seqlens_q")),
      cum_seqlens_k(tensor("cum_seqlens_k")), softmax_aux(tensor("softmax_aux")), out(tensor("out")), lse(tensor("lse")),
      softmax_scale(scalar("softmax_scale")), causal(scalar("causal")), sliding_window(scalar("sliding_window")),
      logits_soft_cap(scalar("logits_soft_cap")), normalize_output(scalar("normalize_output")),
      max_seqlen_q(scalar("max_seqlen_q")), max_seqlen_k(scalar("max_seqlen_k")),
      dropout_prob(scalar("dropout_prob")), dropout_seed(scalar("dropout_seed")),
      sym_D(symbol("D")), sym_Hq(symbol("Hq")), sym_Hkv(symbol("Hkv")), sym_B(symbol("B")), sym_Sq(symbol("Sq")),
      sym_Sk(symbol("Sk")), sym_N(symbol("N")), sym_Tq(symbol("Tq")), sym_Tk(symbol("Tk")), sym_S(symbol("S")),
      pv_seqlen_q(problem_var("seqlen_q")), pv_seqlen_k(problem_var("seqlen_k")) {}

void FlashAttentionOp::check(const engine::Bound& b) const {
  flash_args::check(*this, b);
}

void FlashAttentionOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  v.put(pv_seqlen_q, flash_args::longest(*this, b, false));
  v.put(pv_seqlen_k, flash_args::longest(*this, b, true));
}

FlashFwdParams FlashAttentionOp::params(const engine::Bound& b) const { return flash_args::forward_params(*this, b); }

engine::CpuWork FlashAttentionOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan,
                                              void* params) const {
  static_assert(sizeof(FlashFwdDropoutParams) <= kParamBytes);
  FlashFwdParams* p = nullptr;
  if (flash_args::dropout_on(*this, b)) {
    // Dropout variants read their arguments after the base struct (flash_params.h).
    auto* d = new (params) FlashFwdDropoutParams{};
    static_cast<FlashFwdParams&>(*d) = this->params(b);
    d->dropout = flash_args::dropout_params(*this, b);
    p = d;
  } else {
    p = new (params) FlashFwdParams(this->params(b));
  }
  const int64_t block_q = plan.facts_as<FlashPlanFacts>().block_q;
  if (detail::kv_staging_wanted(*p, block_q)) detail::stage_kv_head_major(*p, b.dtype);
  return {flash_fwd_num_tasks(*p, block_q)};
}

void FlashAttentionOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  auto* f = new (facts) FlashPlanFacts{};
  f->block_q = plan.key.get_int("block_q");
#if EJK_HAVE_CUDA
  if (plan.backend == Backend::cuda) f->cuda = flash_key_facts(schema(), plan.key);
#endif
}

std::vector<VariantKey> FlashAttentionOp::companions(const VariantKey& key) const {
  if (key.backend != "cuda") return {};
  std::vector<VariantKey> keys;
  if (key.get_flag("bias")) {
    // One bias copy per arch serves every bias key (bf16 and f16 alike: it moves bits).
    VariantKey copy = detail::op_schema("flash_fwd_bias_rows").blank_key("cuda", key.target);
    copy.set_enum("elem", "b16");
    keys.push_back(copy);
  }
  // After the bias copy: launch_flash_fwd counts on this order.
  if (key.get_flag("dmask")) keys.push_back(flash_mask_tiles_key(key.target));
  return keys;
}

void FlashAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  const DropoutParams d = flash_args::dropout_params(*this, b);
  reference_flash_fwd(params(b), b.dtype, outputs[out], outputs[lse], flash_args::dropout_on(*this, b) ? &d : nullptr);
}

double FlashAttentionOp::flops(const engine::Bound& b) const {
  const FlashFwdParams p = params(b);
  return 4.0 * double(p.heads_q * p.head_dim) * flash_args::visible_pairs(*this, b, p);
}

VariantKey flash_mask_tiles_key(const std::string& target) {
  VariantKey k = detail::op_schema("flash_mask_tiles").blank_key("cuda", target);
  k.set_enum("elem", "u8");
  return k;
}

const FlashAttentionOp& flash_attention_op() {
  static const FlashAttentionOp op;
  return op;
}

EJK_REGISTER_OP(flash_attention_op);

}  // namespace ejk::ops
