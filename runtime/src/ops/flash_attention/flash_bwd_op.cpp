#include "ops/flash_attention/flash_bwd_op.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ejk/core/error.h"
#include "engine/call.h"
#include "engine/metadata.h"
#include "ops/flash_attention/flash_args.h"
#include "ops/flash_attention/flash_bwd_reference.h"
#include "registry.h"

namespace ejk::ops {
namespace {

[[noreturn]] void bad(std::string_view arg, const std::string& what) {
  throw InvalidArgument(fmt::format("flash_attention_backward: {}: {}", arg, what));
}

using flash_args::as_double, flash_args::as_window, flash_args::given;

}  // namespace

FlashAttentionBackwardOp::FlashAttentionBackwardOp()
    : OpDef("flash_bwd"),
      q(tensor("q")), k(tensor("k")), v(tensor("v")), bias(tensor("bias")), q_segment_ids(tensor("q_segment_ids")),
      kv_segment_ids(tensor("kv_segment_ids")), cum_seqlens_q(tensor("cum_seqlens_q")),
      cum_seqlens_k(tensor("cum_seqlens_k")), softmax_aux(tensor("softmax_aux")), out(tensor("out")), lse(tensor("lse")),
      d_out(tensor("d_out")), d_lse(tensor("d_lse")), dq(tensor("dq")), dk(tensor("dk")), dv(tensor("dv")), dbias(tensor("dbias")),
      dsoftmax_aux(tensor("dsoftmax_aux")), softmax_scale(scalar("softmax_scale")), causal(scalar("causal")),
      sliding_window(scalar("sliding_window")), logits_soft_cap(scalar("logits_soft_cap")),
      normalize_output(scalar("normalize_output")), max_seqlen_q(scalar("max_seqlen_q")),
      max_seqlen_k(scalar("max_seqlen_k")), sym_D(symbol("D")), sym_Hq(symbol("Hq")), sym_Hkv(symbol("Hkv")),
      sym_B(symbol("B")), sym_Sq(symbol("Sq")), sym_Sk(symbol("Sk")), sym_N(symbol("N")), sym_Tq(symbol("Tq")),
      sym_Tk(symbol("Tk")), sym_S(symbol("S")), pv_seqlen_q(problem_var("seqlen_q")),
      pv_seqlen_k(problem_var("seqlen_k")) {}

void FlashAttentionBackwardOp::check(const engine::Bound& b) const {
  flash_args::check(*this, b);
  if (const Scalar& n = b.scalar(normalize_output); given(n) && !std::get<bool>(n))
    bad("normalize_output", "must be true: the backward of an unnormalized output is not implemented");
}

void FlashAttentionBackwardOp::problem(const engine::Bound& b, engine::ProblemValues& v) const {
  v.put(pv_seqlen_q, flash_args::longest(*this, b, false));
  v.put(pv_seqlen_k, flash_args::longest(*this, b, true));
}

FlashBwdParams FlashAttentionBackwardOp::params(const engine::Bound& b) const {
  FlashBwdParams bp{};
  FlashFwdParams& p = bp.fwd;
  const bool varlen = b.mode >= 0;
  // Layout positions 0..3: batch (absent for packed rank-3 tensors: stride 0), seq, head, dim.
  auto strides = [&](int t, i64& sb, i64& ss, i64& sh) {
    sb = b.stride(t, 0), ss = b.stride(t, 1), sh = b.stride(t, 2);
  };
  p.q = b.data(q), p.k = b.data(k), p.v = b.data(v), p.out = b.data(out);
  p.lse = static_cast<float*>(b.data(lse));
  strides(q, p.q_stride_b, p.q_stride_s, p.q_stride_h);
  strides(k, p.k_stride_b, p.k_stride_s, p.k_stride_h);
  strides(v, p.v_stride_b, p.v_stride_s, p.v_stride_h);
  strides(out, p.o_stride_b, p.o_stride_s, p.o_stride_h);
  p.lse_stride_b = varlen ? 0 : b.stride(lse, 0), p.lse_stride_h = b.stride(lse, 1);
  bp.d_out = b.data(d_out);
  bp.d_lse = static_cast<const float*>(b.data(d_lse));  // contiguous, lse's layout
  strides(d_out, bp.do_stride_b, bp.do_stride_s, bp.do_stride_h);
  bp.dq = b.data(dq), bp.dk = b.data(dk), bp.dv = b.data(dv);
  if (b.has(dq)) strides(dq, bp.dq_stride_b, bp.dq_stride_s, bp.dq_stride_h);
  if (b.has(dk)) strides(dk, bp.dk_stride_b, bp.dk_stride_s, bp.dk_stride_h);
  if (b.has(dv)) strides(dv, bp.dv_stride_b, bp.dv_stride_s, bp.dv_stride_h);
  p.heads_q = b.size(sym_Hq), p.heads_kv = b.size(sym_Hkv), p.head_dim = b.size(sym_D);
  p.batch = varlen ? b.size(sym_N) : b.size(sym_B);
  p.seqlen_q = flash_args::longest(*this, b, false), p.seqlen_k = flash_args::longest(*this, b, true);
  if (varlen) {
    p.cu_seqlens_q = static_cast<const i32*>(b.data(cum_seqlens_q));
    p.cu_seqlens_k = static_cast<const i32*>(b.data(cum_seqlens_k));
    p.total_q = b.size(sym_Tq), p.total_k = b.size(sym_Tk);
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
    if (b.has(dbias)) {
      const TensorView& g = b.tensor(dbias);
      bp.dbias = g.data;
      bp.dbias_stride_b = g.shape[0] == 1 ? 0 : g.strides[0];
      bp.dbias_stride_h = g.shape[1] == 1 ? 0 : g.strides[1];
      bp.dbias_stride_q = g.strides[2];
    }
  }
  if (b.has(softmax_aux)) {
    p.softmax_aux = static_cast<const float*>(b.data(softmax_aux));
    p.num_sinks = b.size(sym_S);
    p.sinks_stride_h = b.stride(softmax_aux, 0);  // [S]: absent head dim, shared by all heads
    if (b.has(dsoftmax_aux)) bp.dsoftmax_aux = static_cast<float*>(b.data(dsoftmax_aux));
  }
  const Scalar& scale = b.scalar(softmax_scale);
  p.scale = given(scale) ? float(as_double(scale)) : 1.0f / std::sqrt(float(p.head_dim));
  p.mask.causal = given(b.scalar(causal)) && std::get<bool>(b.scalar(causal));
  p.mask.window_left = p.mask.window_right = kUnbounded;
  if (const Scalar& w = b.scalar(sliding_window); given(w)) {
    // Clamped to the rows, as the forward's: no accepted value overflows q - left or q + right.
    const int64_t rows = std::max(varlen ? p.total_q : b.size(sym_Sq), varlen ? p.total_k : b.size(sym_Sk));
    const auto lr = as_window(w);
    p.mask.window_left = std::min(lr[0], rows), p.mask.window_right = std::min(lr[1], rows);
  }
  if (const Scalar& c = b.scalar(logits_soft_cap); given(c)) p.softcap = float(as_double(c));
  p.normalize_output = 1;
  return bp;
}

void FlashAttentionBackwardOp::plan_facts(const engine::PlanData& plan, void* facts) const {
  auto* f = new (facts) FlashBwdPlanFacts{};
  f->block_q = plan.key.get_int("block_q"), f->block_k = plan.key.get_int("block_k");
}

engine::CpuWork FlashAttentionBackwardOp::cpu_prepare(const engine::Bound& b, const engine::PlanData& plan,
                                                      void* params) const {
  static_assert(sizeof(FlashBwdParams) <= kParamBytes);
  FlashBwdParams& p = *new (params) FlashBwdParams(this->params(b));
  const auto& f = plan.facts_as<FlashBwdPlanFacts>();
  // 0-d placeholders of absent inputs' gradients read as 0 (all-zero bits in every dtype).
  for (auto [grad, input] : {std::pair{dbias, bias}, std::pair{dsoftmax_aux, softmax_aux}})
    if (b.has(grad) && !b.has(input)) std::memset(b.data(grad), 0, dtype_size(b.tensor(grad).dtype));
  if (p.dbias && b.dtype != DType::f32) {
    // f32 sums of dbias per plane (flash_bwd.h's dq tasks); the calling thread's buffer, reused
    // by its next call (it waits for the tasks).
    const FlashBwdPlanes pl = flash_bwd_planes(p);
    thread_local std::vector<float> work;
    const size_t need = size_t(pl.batches * pl.heads * p.fwd.seqlen_q * p.fwd.seqlen_k);
    if (work.size() < need) work.resize(need);
    p.dbias_work = work.data();
  }
  return {flash_bwd_tasks(p, f.block_q, f.block_k).total()};
}

#if !EJK_HAVE_CUDA
void FlashAttentionBackwardOp::cuda_launch(const engine::Bound&, const engine::PlanData&,
                                           engine::CudaLaunchContext&) const {
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
}
engine::OpDef::Workspace FlashAttentionBackwardOp::cuda_workspace(const engine::Bound&,
                                                                  const engine::PlanData&) const {
  return {};
}
#endif

void FlashAttentionBackwardOp::reference(const engine::Bound& b, double* const* outputs) const {
  FlashBwdReferenceOut r;
  r.dq = outputs[dq], r.dk = outputs[dk], r.dv = outputs[dv];
  if (b.has(bias)) r.dbias = outputs[dbias];
  if (b.has(softmax_aux)) r.dsoftmax_aux = outputs[dsoftmax_aux];
  reference_flash_bwd(params(b), b.dtype, r);
  // 0-d placeholders of absent inputs' gradients read as 0.
  if (!b.has(bias) && outputs[dbias]) outputs[dbias][0] = 0;
  if (!b.has(softmax_aux) && outputs[dsoftmax_aux]) outputs[dsoftmax_aux][0] = 0;
}

double FlashAttentionBackwardOp::flops(const engine::Bound& b) const {
  // 2.5 times the forward's: the visible pairs of each head, clamped to the sequences.
  const FlashFwdParams p = params(b).fwd;
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
  return 2.5 * 4.0 * double(p.heads_q * p.head_dim) * visible;
}

const FlashAttentionBackwardOp& flash_attention_backward_op() {
  static const FlashAttentionBackwardOp op;
  return op;
}

EJK_REGISTER_OP(flash_attention_backward_op);

}  // namespace ejk::ops
