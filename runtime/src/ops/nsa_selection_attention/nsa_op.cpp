#include "ops/nsa_selection_attention/nsa_op.h"

#include <fmt/format.h>

#include <cmath>
#include <new>

#include "ejk/core/error.h"
#include "ops/nsa_selection_attention/nsa_reference.h"

namespace ejk::ops {

NsaSelectionOp::NsaSelectionOp(std::string_view kernel_op, bool backward_)
    : OpDef(kernel_op), backward(backward_), q(tensor("q")), k(tensor("k")), v(tensor("v")),
      block_indices(tensor("block_indices")), block_counts(tensor("block_counts")), out(tensor("out")),
      lse(tensor("lse")), d_out(backward_ ? tensor("d_out") : -1), d_lse(backward_ ? tensor("d_lse") : -1), dq(backward_ ? tensor("dq") : -1),
      dk(backward_ ? tensor("dk") : -1), dv(backward_ ? tensor("dv") : -1), softmax_scale(scalar("softmax_scale")),
      block_size(scalar("block_size")), sym_B(symbol("B")), sym_T(symbol("T")), sym_Hq(symbol("Hq")),
      sym_Hkv(symbol("Hkv")), sym_D(symbol("D")), sym_S(symbol("S")) {}

void NsaSelectionOp::check(const engine::Bound& b) const {
  const int64_t hq = b.size(sym_Hq), hkv = b.size(sym_Hkv);
  if (hkv <= 0 || hq % hkv != 0)
    throw InvalidArgument(fmt::format("{}: k: number of kv heads ({}) must divide the number of q heads ({})",
                                      name(), hkv, hq));
  if (b.size(sym_D) <= 0)
    throw InvalidArgument(fmt::format("{}: q: head_dim must be positive, got {}", name(), b.size(sym_D)));
}

NsaParams NsaSelectionOp::params(const engine::Bound& b) const {
  NsaParams p{};
  // Layout positions: 0 batch, 1 token, 2 head (3 slot), the head dim contiguous.
  auto strides = [&](int t, i64& sb, i64& st, i64& sh) {
    sb = b.stride(t, 0), st = b.stride(t, 1), sh = b.stride(t, 2);
  };
  p.q = b.data(q), p.k = b.data(k), p.v = b.data(v), p.out = b.data(out);
  p.lse = static_cast<float*>(b.data(lse));
  strides(q, p.q_stride_b, p.q_stride_t, p.q_stride_h);
  strides(k, p.k_stride_b, p.k_stride_t, p.k_stride_h);
  strides(v, p.v_stride_b, p.v_stride_t, p.v_stride_h);
  if (b.has(out)) strides(out, p.o_stride_b, p.o_stride_t, p.o_stride_h);
  if (b.has(lse)) strides(lse, p.lse_stride_b, p.lse_stride_t, p.lse_stride_h);
  p.block_indices = static_cast<const i32*>(b.data(block_indices));
  strides(block_indices, p.bi_stride_b, p.bi_stride_t, p.bi_stride_h);
  p.bi_stride_s = b.stride(block_indices, 3);
  if (b.has(block_counts)) {
    p.block_counts = static_cast<const i32*>(b.data(block_counts));
    strides(block_counts, p.bc_stride_b, p.bc_stride_t, p.bc_stride_h);
  }
  p.batch = b.size(sym_B), p.seqlen = b.size(sym_T), p.heads_q = b.size(sym_Hq), p.heads_kv = b.size(sym_Hkv);
  p.head_dim = b.size(sym_D), p.slots = b.size(sym_S), p.block_size = b.i64(block_size);
  p.scale = b.given(softmax_scale) ? float(b.f64(softmax_scale)) : 1.0f / std::sqrt(float(p.head_dim));
  if (backward) {
    p.d_out = b.data(d_out);
    strides(d_out, p.do_stride_b, p.do_stride_t, p.do_stride_h);
    if (b.has(d_lse)) {
      p.d_lse = static_cast<const float*>(b.data(d_lse));
      strides(d_lse, p.dl_stride_b, p.dl_stride_t, p.dl_stride_h);
    }
    p.dq = b.data(dq), p.dk = b.data(dk), p.dv = b.data(dv);
    if (b.has(dq)) strides(dq, p.dq_stride_b, p.dq_stride_t, p.dq_stride_h);
    if (b.has(dk)) strides(dk, p.dk_stride_b, p.dk_stride_t, p.dk_stride_h);
    if (b.has(dv)) strides(dv, p.dv_stride_b, p.dv_stride_t, p.dv_stride_h);
  }
  return p;
}

engine::CpuWork NsaSelectionOp::cpu_prepare(const engine::Bound& b, const engine::PlanData&, void* params) const {
  static_assert(sizeof(NsaParams) <= kParamBytes);
  const NsaParams& p = *new (params) NsaParams(this->params(b));
  return {nsa_row_tasks(p) + (backward ? nsa_key_tasks(p) : 0)};
}

void NsaSelectionOp::reference(const engine::Bound& b, double* const* outputs) const {
  const NsaParams p = params(b);
  if (!backward) return reference_nsa_fwd(p, b.dtype, outputs[out], outputs[lse]);
  reference_nsa_bwd(p, b.dtype, outputs[dq], outputs[dk], outputs[dv]);
}

double NsaSelectionOp::flops(const engine::Bound& b) const {
  // Every slot counted as a full block (4 FLOPs per pair and head dim); the backward 2.5 times.
  const double pairs = double(b.size(sym_B)) * double(b.size(sym_T)) * double(b.size(sym_Hq)) *
                       double(b.size(sym_S)) * double(b.i64(block_size));
  return (backward ? 2.5 : 1.0) * 4.0 * double(b.size(sym_D)) * pairs;
}

const NsaSelectionOp& nsa_selection_attention_op() {
  static const NsaSelectionOp op("nsa_slc_fwd", false);
  return op;
}

const NsaSelectionOp& nsa_selection_attention_backward_op() {
  static const NsaSelectionOp op("nsa_slc_bwd", true);
  return op;
}

EJK_REGISTER_OP(nsa_selection_attention_op);
EJK_REGISTER_OP(nsa_selection_attention_backward_op);

}  // namespace ejk::ops
