// CPU flash attention backward (the math: common/flash_bwd_params.h). The task list is
// flash_bwd_tasks': dk/dv tasks (sequence, kv head, key block) walk the queries that see their
// keys; dq tasks (bias plane, query block) walk the keys each query sees, and sum dbias over
// the (batch, head) pairs of their plane; sink tasks sum one sink row's gradient. Each output
// element is written by one task in a fixed order: the result does not depend on threads.
//
// Rows are converted to f32 once per use and the products run on vf vectors across head_dim.
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

template <ElemKind kElem, int kHeadDim, int kBlockQ, int kBlockK, AttentionFlags kFlags>
struct FlashBwdConfig {
  static constexpr ElemKind elem = kElem;
  static constexpr int head_dim = kHeadDim, block_q = kBlockQ, block_k = kBlockK;
  static constexpr AttentionFlags flags = kFlags;
};

namespace bwd {

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

// Sequence b's rows: its first query and key row on the sequence axes (dense: 0, with the
// batch stride; varlen: from cu_seqlens) and its lengths.
struct Seq {
  i64 b, q_row0, k_row0, sq, sk;
  bool varlen;
};
EJK_HD Seq seq_of(const FlashFwdParams& f, i64 b) {
  if (f.cu_seqlens_q) {
    const TokenSpan tq = token_span(f.cu_seqlens_q, 0, f.total_q, b), tk = token_span(f.cu_seqlens_k, 0, f.total_k, b);
    return {b, tq.begin, tk.begin, tq.end - tq.begin, tk.end - tk.begin, true};
  }
  return {b, 0, 0, f.seqlen_q, f.seqlen_k, false};
}
// Element offset of row `row` (sequence position) of head h in a [B, S, H, D] tensor.
EJK_HD i64 at(const Seq& s, i64 row0, i64 row, i64 h, i64 sb, i64 ss, i64 sh) {
  return (s.varlen ? 0 : s.b * sb) + (row0 + row) * ss + h * sh;
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

// Whether the dense mask shows query i of head h some key of [k_first, k_last] (always true
// without one): rows and tiles it hides entirely are skipped before their operands are loaded.
template <class Cfg>
EJK_HD bool dense_mask_any(const FlashFwdParams& f, const Seq& s, i64 h, i64 i, i64 k_first, i64 k_last) {
  if constexpr (Cfg::flags.dense_mask) {
    const u8* row = flash_mask_row(f, s.b, h, i);
    for (i64 j = k_first; j <= k_last; ++j)
      if (dense_mask_visible(row, j)) return true;
    return false;
  }
  return true;
}

// dk, dv of key block kb of kv head hk in sequence b: every query head of the group, every query
// block that sees the keys.
template <class Cfg> void kv_task(const FlashBwdParams& p, i64 b, i64 hk, i64 kb) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int D = Cfg::head_dim, BK = Cfg::block_k;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashFwdParams& f = p.fwd;
  const Seq s = seq_of(f, b);
  const i64 k_first = kb * BK;
  if (k_first >= s.sk) return;
  const int nk = int(min_of<i64>(BK, s.sk - k_first));
  float kt[BK][D], vt[BK][D], dk[BK][D], dv[BK][D], scratch[D];
  for (int j = 0; j < nk; ++j) {
    load_row<E, D>(f.k, at(s, s.k_row0, k_first + j, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h), kt[j]);
    load_row<E, D>(f.v, at(s, s.k_row0, k_first + j, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h), vt[j]);
    for (int d = 0; d < D; ++d) dk[j][d] = dv[j][d] = 0.0f;
  }
  const MaskSpec m = variant_mask<F>(f.mask);
  const PositionSpan qs = block_visible_queries<bounded_mask(F)>(m, k_first, k_first + nk - 1, s.sq);
  const i64 group = f.heads_q / f.heads_kv;
  QueryRow<Cfg> r;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
    for (i64 i = qs.first; i <= qs.last; ++i) {
      // The keys of this block row i sees by position.
      const PositionSpan ks = block_visible_keys<bounded_mask(F)>(m, i, i, s.sk);
      const int j0 = int(max_of<i64>(ks.first - k_first, 0)), j1 = int(min_of<i64>(ks.last - k_first, nk - 1));
      if (j0 > j1 || !dense_mask_any<Cfg>(f, s, h, i, k_first + j0, k_first + j1)) continue;
      if (!load_query<Cfg>(p, s, h, i, r, scratch)) continue;
      for (int j = j0; j <= j1; ++j) {
        float prob, dx;
        if (!pair_grad<Cfg>(p, r, s, h, i, k_first + j, kt[j], vt[j], prob, dx)) continue;
        axpy<D>(dv[j], prob, r.d_out);
        axpy<D>(dk[j], dx * f.scale, r.q);
      }
    }
  }
  for (int j = 0; j < nk; ++j) {
    store_row<E, D>(p.dk, at(s, s.k_row0, k_first + j, hk, p.dk_stride_b, p.dk_stride_s, p.dk_stride_h), dk[j]);
    store_row<E, D>(p.dv, at(s, s.k_row0, k_first + j, hk, p.dv_stride_b, p.dv_stride_s, p.dv_stride_h), dv[j]);
  }
}

// dq of query block qb for every (batch, head) of bias plane (pb, ph), and that plane's dbias
// rows, summed over the pairs in a fixed order.
template <class Cfg> void q_task(const FlashBwdParams& p, i64 pb, i64 ph, i64 qb) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int D = Cfg::head_dim, BQ = Cfg::block_q, BK = Cfg::block_k;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashFwdParams& f = p.fwd;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const MaskSpec m = variant_mask<F>(f.mask);
  const i64 group = f.heads_q / f.heads_kv;
  // dbias rows of this task, f32: the output itself when f32, else the workspace.
  float* acc = nullptr;
  i64 acc_stride = 0;
  const bool with_dbias = F.bias && p.dbias;
  const i64 q_first = qb * BQ;
  if (with_dbias) {
    if constexpr (E == ElemKind::f32) {
      acc = static_cast<float*>(p.dbias) + pb * p.dbias_stride_b + ph * p.dbias_stride_h + q_first * p.dbias_stride_q;
      acc_stride = p.dbias_stride_q;
    } else {
      acc = p.dbias_work + ((pb * pl.heads + ph) * f.seqlen_q + q_first) * f.seqlen_k;
      acc_stride = f.seqlen_k;
    }
    const i64 rows = min_of<i64>(BQ, f.seqlen_q - q_first);
    for (i64 i = 0; i < rows; ++i)
      for (i64 j = 0; j < f.seqlen_k; ++j) acc[i * acc_stride + j] = 0.0f;
  }
  // The block's query rows and dq accumulators; K/V tiles loaded once for every row of the block.
  QueryRow<Cfg> rows[BQ];
  bool live[BQ];
  float dq[BQ][D], kt[BK][D], vt[BK][D], scratch[D];
  for (i64 b = pb * pl.fold_b; b < (pb + 1) * pl.fold_b; ++b) {
    const Seq s = seq_of(f, b);
    if (q_first >= s.sq) continue;
    const int nq = int(min_of<i64>(BQ, s.sq - q_first));
    const TileRange tiles = visible_key_tiles<bounded_mask(F)>(m, q_first, q_first + nq - 1, s.sk, BK);
    for (i64 h = ph * pl.fold_h; h < (ph + 1) * pl.fold_h; ++h) {
      const i64 hk = h / group;
      for (int qi = 0; qi < nq; ++qi) {
        live[qi] = load_query<Cfg>(p, s, h, q_first + qi, rows[qi], scratch);
        for (int d = 0; d < D; ++d) dq[qi][d] = 0.0f;
      }
      for (int tile = tiles.begin; tile < tiles.end; ++tile) {
        const i64 k_first = i64(tile) * BK;
        const int nk = int(min_of<i64>(BK, s.sk - k_first));
        if constexpr (F.dense_mask) {
          bool any = false;
          for (int qi = 0; qi < nq && !any; ++qi)
            any = live[qi] && dense_mask_any<Cfg>(f, s, h, q_first + qi, k_first, k_first + nk - 1);
          if (!any) continue;  // the mask hides the whole tile: its K/V rows are not even loaded
        }
        for (int j = 0; j < nk; ++j) {
          load_row<E, D>(f.k, at(s, s.k_row0, k_first + j, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h), kt[j]);
          load_row<E, D>(f.v, at(s, s.k_row0, k_first + j, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h), vt[j]);
        }
        for (int qi = 0; qi < nq; ++qi) {
          if (!live[qi]) continue;
          const i64 i = q_first + qi;
          const PositionSpan ks = block_visible_keys<bounded_mask(F)>(m, i, i, s.sk);
          const int j0 = int(max_of<i64>(ks.first - k_first, 0)), j1 = int(min_of<i64>(ks.last - k_first, nk - 1));
          for (int j = j0; j <= j1; ++j) {
            float prob, dx;
            if (!pair_grad<Cfg>(p, rows[qi], s, h, i, k_first + j, kt[j], vt[j], prob, dx)) continue;
            axpy<D>(dq[qi], dx * f.scale, kt[j]);
            if (with_dbias) acc[qi * acc_stride + k_first + j] += dx;
          }
        }
      }
      for (int qi = 0; qi < nq; ++qi)
        store_row<E, D>(p.dq, at(s, s.q_row0, q_first + qi, h, p.dq_stride_b, p.dq_stride_s, p.dq_stride_h), dq[qi]);
    }
  }
  if constexpr (E != ElemKind::f32) {
    if (!with_dbias) return;
    const i64 rows = min_of<i64>(BQ, f.seqlen_q - q_first);
    auto* out = static_cast<Elem<E>*>(p.dbias);
    for (i64 i = 0; i < rows; ++i)
      for (i64 j = 0; j < f.seqlen_k; ++j)
        out[pb * p.dbias_stride_b + ph * p.dbias_stride_h + (q_first + i) * p.dbias_stride_q + j] =
            from_f32<E>(acc[i * acc_stride + j]);
  }
}

// dsoftmax_aux of sink row hs: head hs's sinks, or (shared sinks) every head's. Summed in double
// per sink: terms of both signs over every row of the heads, whose sum is often far smaller.
template <class Cfg> void sink_task(const FlashBwdParams& p, i64 hs) {
  constexpr int D = Cfg::head_dim;
  constexpr int kChunk = 16;  // sinks summed per pass over the rows
  const FlashFwdParams& f = p.fwd;
  const bool shared = f.sinks_stride_h == 0;
  float* ds = p.dsoftmax_aux + hs * f.num_sinks;
  const float* sinks = f.softmax_aux + hs * f.sinks_stride_h;
  float scratch[D];
  QueryRow<Cfg> r;
  for (i64 t0 = 0; t0 < f.num_sinks; t0 += kChunk) {
    const int nt = int(min_of<i64>(kChunk, f.num_sinks - t0));
    double acc[kChunk] = {};
    for (i64 h = shared ? 0 : hs; h < (shared ? f.heads_q : hs + 1); ++h)
      for (i64 b = 0; b < f.batch; ++b) {
        const Seq s = seq_of(f, b);
        for (i64 i = 0; i < s.sq; ++i) {
          if (!load_query<Cfg>(p, s, h, i, r, scratch)) continue;
          for (int t = 0; t < nt; ++t) acc[t] -= double(exp_approx(sinks[t0 + t] - r.lse)) * double(r.delta);
        }
      }
    for (int t = 0; t < nt; ++t) ds[t0 + t] = float(acc[t]);
  }
}

}  // namespace bwd

// Runs tasks [task_begin, task_end) of flash_bwd_tasks(p, block_q, block_k).
template <class Cfg> void flash_bwd_tasks(const FlashBwdParams& p, long long task_begin, long long task_end) {
  const FlashFwdParams& f = p.fwd;
  const FlashBwdTasks n = flash_bwd_tasks(p, Cfg::block_q, Cfg::block_k);
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, Cfg::block_k), qblocks = ceil_div<i64>(f.seqlen_q, Cfg::block_q);
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < n.kv) {
      bwd::kv_task<Cfg>(p, t / (f.heads_kv * kblocks), t / kblocks % f.heads_kv, t % kblocks);
    } else if (t < n.kv + n.q) {
      const i64 u = t - n.kv;
      bwd::q_task<Cfg>(p, u / (pl.heads * qblocks), u / qblocks % pl.heads, u % qblocks);
    } else {
      if constexpr (Cfg::flags.sinks) bwd::sink_task<Cfg>(p, t - n.kv - n.q);
    }
  }
}

}  // namespace ejk::cpu
