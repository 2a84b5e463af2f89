// The row-by-row form of the CPU flash attention backward's math (common/flash_bwd_params.h):
// one query row's operands and one (query, key) pair's gradient. The block-sparse backward
// (blocksparse.h) walks its layout with them; flash_bwd.h works on tiles (flash_bwd_tile.h).
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cpu/flash_bwd_tile.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu::bwd {

// y += a * x
template <int D> EJK_HD void axpy(float* y, float a, const float* x) {
  const vf av = splat<vf>(a);
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) vstore(y + d, vload(y + d) + av * vload(x + d));
  for (; d < D; ++d) y[d] += a * x[d];
}

template <ElemKind K, int D> EJK_HD void store_row(void* base, i64 at, const float* x) {
  Elem<K>* dst = static_cast<Elem<K>*>(base) + at;
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) store_from_f32<K>(dst + d, vload(x + d));
  for (; d < D; ++d) dst[d] = from_f32<K>(x[d]);
}

template <ElemKind K, int D> EJK_HD void load_row(const void* base, i64 at, float* dst) {
  convert_row<K>(static_cast<const Elem<K>*>(base) + at, dst, D);
}

// One query row's operands: q, d_out, D = d_out . out - d_lse, lse.
template <class Cfg> struct QueryRow {
  float q[Cfg::head_dim], d_out[Cfg::head_dim];
  float delta, lse;
  i32 segment;
};

// Loads query i of head h; false when its row saw nothing (lse -inf: every gradient is 0).
template <class Cfg>
EJK_HD bool load_query(const FlashBwdParams& p, const Seq& s, i64 h, i64 i, QueryRow<Cfg>& r, float* scratch) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int D = Cfg::head_dim;
  const FlashFwdParams& f = p.fwd;
  const i64 lse_at = (s.varlen ? 0 : s.b * f.lse_stride_b) + h * f.lse_stride_h + s.q_row0 + i;
  r.lse = f.lse[lse_at];
  if (r.lse == neg_inf_f32()) return false;
  load_row<E, D>(f.q, at(s, s.q_row0, i, h, f.q_stride_b, f.q_stride_s, f.q_stride_h), r.q);
  load_row<E, D>(p.d_out, at(s, s.q_row0, i, h, p.do_stride_b, p.do_stride_s, p.do_stride_h), r.d_out);
  load_row<E, D>(f.out, at(s, s.q_row0, i, h, f.o_stride_b, f.o_stride_s, f.o_stride_h), scratch);
  r.delta = row_dot<D>(r.d_out, scratch) - (p.d_lse ? p.d_lse[lse_at] : 0.0f);
  r.segment = Cfg::flags.segments ? f.q_segment_ids[s.b * f.q_seg_stride_b + i] : 0;
  return true;
}

// The gradient dX of the pre-cap logit of (query row r = query i of head h, key j) and the
// pair's probability (dropout variants: its dropped weight, the one out was made of); false when the pair's segments hide it (the caller checks positions).
template <class Cfg>
EJK_HD bool pair_grad(const FlashBwdParams& p, const QueryRow<Cfg>& r, const Seq& s, i64 h, i64 i, i64 j,
                      const float* k_row, const float* v_row, float& prob, float& dx) {
  constexpr AttentionFlags F = Cfg::flags;
  constexpr int D = Cfg::head_dim;
  const FlashFwdParams& f = p.fwd;
  if (F.segments && !segment_visible(r.segment, f.kv_segment_ids[s.b * f.kv_seg_stride_b + j])) return false;
  if (F.dense_mask && !dense_mask_visible(flash_mask_row(f, s.b, h, i), j)) return false;
  float bias = 0.0f;
  if constexpr (F.bias)
    bias = to_f32<Cfg::elem>(static_cast<const Elem<Cfg::elem>*>(
        f.bias)[s.b * f.bias_stride_b + h * f.bias_stride_h + i * f.bias_stride_q + j]);
  const float inv_cap = F.softcap ? 1.0f / f.softcap : 0.0f;
  const float x = transform_logit<F.bias, F.softcap>(f.scale * row_dot<D>(r.q, k_row), bias, f.softcap, inv_cap,
                                                     FastTanh{});
  prob = exp_approx(prob_exponent(x, r.lse));
  float ds;
  if constexpr (F.dropout) {
    // The dropped weight feeds dv; dP is masked and scaled (flash_bwd_params.h).
    const float z = dropout_factor(flash_dropout(p), s.b, h, i, j);
    ds = prob * (z * row_dot<D>(r.d_out, v_row) - r.delta);
    prob *= z;
  } else {
    ds = prob * (row_dot<D>(r.d_out, v_row) - r.delta);
  }
  if constexpr (F.softcap) {
    const float t = x * inv_cap;  // x is the capped logit cap * tanh(pre / cap)
    ds *= 1.0f - t * t;
  }
  dx = ds;
  return true;
}

}  // namespace ejk::cpu::bwd
