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
namespace {

[[noreturn]] void bad(std::string_view arg, const std::string& what) {
  throw InvalidArgument(fmt::format("flash_attention: {}: {}", arg, what));
}

using flash_args::as_double, flash_args::as_window, flash_args::given;

}  // namespace

FlashAttentionOp::FlashAttentionOp()
    : OpDef("flash_fwd"),
      q(tensor("q")), k(tensor("k")), v(tensor("v")), bias(tensor("bias")), q_segment_ids(tensor("q_segment_ids")),
      kv_segment_ids(tensor("kv_segment_ids")), cum_seqlens_q(tensor("cum_seqlens_q")),
      cum_seqlens_k(tensor("cum_seqlens_k")), softmax_aux(tensor("softmax_aux")), out(tensor("out")), lse(tensor("lse")),
      softmax_scale(scalar("softmax_scale")), causal(scalar("causal")), sliding_window(scalar("sliding_window")),
      logits_soft_cap(scalar("logits_soft_cap")), normalize_output(scalar("normalize_output")),
      max_seqlen_q(scalar("max_seqlen_q")), max_seqlen_k(scalar("max_seqlen_k")),
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

FlashFwdParams FlashAttentionOp::params(const engine::Bound& b) const {
  FlashFwdParams p{};
  const bool varlen = b.mode >= 0;
  p.q = b.data(q), p.k = b.data(k), p.v = b.data(v), p.out = b.data(out);
  p.lse = static_cast<float*>(b.data(lse));
  // Layout positions 0..3: batch (absent for packed rank-3 tensors: stride 0), seq, head, dim.
  p.q_stride_b = b.stride(q, 0), p.q_stride_s = b.stride(q, 1), p.q_stride_h = b.stride(q, 2);
  p.k_stride_b = b.stride(k, 0), p.k_stride_s = b.stride(k, 1), p.k_stride_h = b.stride(k, 2);
  p.v_stride_b = b.stride(v, 0), p.v_stride_s = b.stride(v, 1), p.v_stride_h = b.stride(v, 2);
  if (b.has(out)) p.o_stride_b = b.stride(out, 0), p.o_stride_s = b.stride(out, 1), p.o_stride_h = b.stride(out, 2);
  if (b.has(lse)) p.lse_stride_b = varlen ? 0 : b.stride(lse, 0), p.lse_stride_h = b.stride(lse, 1);
  p.heads_q = b.size(sym_Hq), p.heads_kv = b.size(sym_Hkv), p.head_dim = b.size(sym_D);
  p.batch = varlen ? b.size(sym_N) : b.size(sym_B);
  p.seqlen_q = flash_args::longest(*this, b, false), p.seqlen_k = flash_args::longest(*this, b, true);
  if (varlen) {
    p.cu_seqlens_q = static_cast<const i32*>(b.data(cum_seqlens_q));
    p.cu_seqlens_k = static_cast<const i32*>(b.data(cum_seqlens_k));
    p.total_q = b.size(sym_Tq), p.total_k = b.size(sym_Tk);  // the CUDA kernels' TMA bounds
  }
  if (b.has(q_segment_ids)) {
    p.q_segment_ids = static_cast<const i32*>(b.data(q_segment_ids));
    p.kv_segment_ids = static_cast<const i32*>(b.data(kv_segment_ids));
    p.q_seg_stride_b = b.stride(q_segment_ids, 0), p.kv_seg_stride_b = b.stride(kv_segment_ids, 0);
  }
  if (b.has(bias)) {
    const TensorView& t = b.tensor(bias);
    p.bias = t.data;
    p.bias_stride_b = t.shape[0] == 1 ? 0 : t.strides[0];  // size-1 dims broadcast
    p.bias_stride_h = t.shape[1] == 1 ? 0 : t.strides[1];
    p.bias_stride_q = t.strides[2];
  }
  if (b.has(softmax_aux)) {
    p.softmax_aux = static_cast<const float*>(b.data(softmax_aux));
    p.num_sinks = b.size(sym_S);
    p.sinks_stride_h = b.stride(softmax_aux, 0);  // [S]: absent head dim, shared by all heads
  }
  const Scalar& scale = b.scalar(softmax_scale);
  p.scale = given(scale) ? float(as_double(scale)) : 1.0f / std::sqrt(float(p.head_dim));
  p.mask.causal = given(b.scalar(causal)) && std::get<bool>(b.scalar(causal));
  p.mask.window_left = p.mask.window_right = kUnbounded;
  if (const Scalar& w = b.scalar(sliding_window); given(w)) {
    // A bound past every row of q and k means no limit on that side; clamped to the rows, so the
    // kernels' q - left and q + right cannot overflow for any accepted value.
    const int64_t rows = std::max(varlen ? p.total_q : b.size(sym_Sq), varlen ? p.total_k : b.size(sym_Sk));
    const auto lr = as_window(w);
    p.mask.window_left = std::min(lr[0], rows), p.mask.window_right = std::min(lr[1], rows);
  }
  if (const Scalar& c = b.scalar(logits_soft_cap); given(c)) p.softcap = float(as_double(c));
  const Scalar& norm = b.scalar(normalize_output);
  p.normalize_output = !given(norm) || std::get<bool>(norm) ? 1 : 0;
  return p;
}

engine::CpuWork FlashAttentionOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan,
                                              void* params) const {
  static_assert(sizeof(FlashFwdParams) <= kParamBytes);
  auto* p = new (params) FlashFwdParams(this->params(b));
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
  if (key.backend != "cuda" || !key.get_flag("bias")) return {};
  // One bias copy per arch serves every bias key (bf16 and f16 alike: it moves bits).
  VariantKey copy = detail::op_schema("flash_fwd_bias_rows").blank_key("cuda", key.target);
  copy.set_enum("elem", "b16");
  return {copy};
}

void FlashAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  reference_flash_fwd(params(b), b.dtype, outputs[out], outputs[lse]);
}

double FlashAttentionOp::flops(const engine::Bound& b) const {
  const FlashFwdParams p = params(b);
  // Visible (query, key) pairs of one head: the mask's bounds, clamped to the sequences.
  auto pairs = [&](int64_t sq, int64_t sk) {
    double n = 0;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t lo = std::max<int64_t>(0, first_visible_key(i, p.mask));
      const int64_t hi = std::min<int64_t>(sk - 1, last_visible_key(i, p.mask));
      if (hi >= lo) n += double(hi - lo + 1);
    }
    return n;
  };
  double visible = 0;
  if (p.cu_seqlens_q) {
    for (int t : {cum_seqlens_q, cum_seqlens_k})
      if (b.tensor(t).device.kind != DeviceKind::cpu)
        bad(schema().tensors()[size_t(t)].name, "counting FLOPs reads it on the host, got a tensor on " +
                                                    to_string(b.tensor(t).device));
    for (int64_t s = 0; s < p.batch; ++s)
      visible += pairs(p.cu_seqlens_q[s + 1] - p.cu_seqlens_q[s], p.cu_seqlens_k[s + 1] - p.cu_seqlens_k[s]);
  } else {
    visible = double(p.batch) * pairs(p.seqlen_q, p.seqlen_k);
  }
  return 4.0 * double(p.heads_q * p.head_dim) * visible;
}

const FlashAttentionOp& flash_attention_op() {
  static const FlashAttentionOp op;
  return op;
}

EJK_REGISTER_OP(flash_attention_op);

}  // namespace ejk::ops
