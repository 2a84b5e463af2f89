// CPU selection attention of native sparse attention, forward and backward (the math:
// common/nsa_params.h). A row task holds up to kNsaRowHeads query heads of one token's kv group
// (they share the token's blocks) and walks the selected blocks in tiles of kNsaKeyTile keys,
// K and V converted to f32 once per tile for all its heads. The backward's dk/dv task owns a
// tile of one key block and scans the later tokens for those that selected the block, so each
// output element is written by one task in a fixed order (no atomics, thread-independent).
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/nsa_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {
namespace nsa {

template <int D> EJK_HD float dot(const float* a, const float* b) {
  vf acc = splat<vf>(0.0f);
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) acc += vload(a + d) * vload(b + d);
  float s = reduce_add(acc);
  for (; d < D; ++d) s += a[d] * b[d];
  return s;
}

// y = y * c + a * x
template <int D> EJK_HD void scale_axpy(float* y, float c, float a, const float* x) {
  const vf cv = splat<vf>(c), av = splat<vf>(a);
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) vstore(y + d, vload(y + d) * cv + av * vload(x + d));
  for (; d < D; ++d) y[d] = y[d] * c + a * x[d];
}

template <ElemKind K, int D> EJK_HD void load(const void* base, i64 at, float* dst) {
  convert_row<K>(static_cast<const Elem<K>*>(base) + at, dst, D);
}

template <ElemKind K, int D> EJK_HD void store(void* base, i64 at, const float* x) {
  Elem<K>* dst = static_cast<Elem<K>*>(base) + at;
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) store_from_f32<K>(dst + d, vload(x + d));
  for (; d < D; ++d) dst[d] = from_f32<K>(x[d]);
}

// Keys [k0, k0 + n) of kv head hk in sequence b, as f32 rows.
template <class Cfg>
EJK_HD void load_tile(const NsaParams& p, i64 b, i64 hk, i64 k0, int n, float (*kt)[Cfg::kHeadDim],
                      float (*vt)[Cfg::kHeadDim]) {
  constexpr int D = Cfg::kHeadDim;
  for (int j = 0; j < n; ++j) {
    load<Cfg::kElem, D>(p.k, b * p.k_stride_b + (k0 + j) * p.k_stride_t + hk * p.k_stride_h, kt[j]);
    load<Cfg::kElem, D>(p.v, b * p.v_stride_b + (k0 + j) * p.v_stride_t + hk * p.v_stride_h, vt[j]);
  }
}

// A row task's place: sequence, token, kv head and its query heads [h0, h0 + rows).
struct RowTask {
  i64 b, t, hk, h0;
  int rows;
};

EJK_HD RowTask row_task(const NsaParams& p, i64 task) {
  const i64 group = p.heads_q / p.heads_kv, chunks = ceil_div(group, kNsaRowHeads);
  RowTask r;
  const i64 c = task % chunks;
  task /= chunks;
  r.hk = task % p.heads_kv;
  task /= p.heads_kv;
  r.t = task % p.seqlen;
  r.b = task / p.seqlen;
  r.h0 = r.hk * group + c * kNsaRowHeads;
  r.rows = int(min_of(kNsaRowHeads, group - c * kNsaRowHeads));
  return r;
}

// Calls visit(k0, n) for each tile of keys token t attends to: its selected blocks in slot
// order, each clipped to keys <= t and cut into tiles of at most kNsaKeyTile.
template <class Visit> EJK_HD void for_each_tile(const NsaParams& p, const RowTask& r, Visit&& visit) {
  const i64 n = nsa_count(p, r.b, r.t, r.hk);
  for (i64 s = 0; s < n; ++s) {
    const i64 c = nsa_selected_block(p, r.b, r.t, r.hk, s);
    if (c < 0) continue;
    const i64 hi = min_of((c + 1) * p.block_size, r.t + 1);
    for (i64 k0 = c * p.block_size; k0 < hi; k0 += kNsaKeyTile) visit(k0, int(min_of(kNsaKeyTile, hi - k0)));
  }
}

template <class Cfg> void fwd_task(const NsaParams& p, const RowTask& r) {
  constexpr ElemKind E = Cfg::kElem;
  constexpr int D = Cfg::kHeadDim, R = int(kNsaRowHeads), BK = int(kNsaKeyTile);
  float q[R][D], acc[R][D], m[R], l[R], kt[BK][D], vt[BK][D], s[BK];
  for (int i = 0; i < r.rows; ++i) {
    load<E, D>(p.q, r.b * p.q_stride_b + r.t * p.q_stride_t + (r.h0 + i) * p.q_stride_h, q[i]);
    for (int d = 0; d < D; ++d) acc[i][d] = 0.0f;
    m[i] = neg_inf_f32(), l[i] = 0.0f;
  }
  for_each_tile(p, r, [&](i64 k0, int n) {
    load_tile<Cfg>(p, r.b, r.hk, k0, n, kt, vt);
    for (int i = 0; i < r.rows; ++i) {
      float mx = m[i];
      for (int j = 0; j < n; ++j) {
        s[j] = p.scale * dot<D>(q[i], kt[j]);
        mx = max_of(mx, s[j]);
      }
      // Online softmax: rescale what came before to the new running max.
      const float corr = exp_approx(m[i] - mx);
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) s[j] = exp_approx(s[j] - mx), sum += s[j];
      l[i] = l[i] * corr + sum;
      m[i] = mx;
      for (int j = 0; j < n; ++j) scale_axpy<D>(acc[i], j == 0 ? corr : 1.0f, s[j], vt[j]);
    }
  });
  for (int i = 0; i < r.rows; ++i) {
    const i64 h = r.h0 + i;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    for (int d = 0; d < D; ++d) acc[i][d] *= inv;
    store<E, D>(p.out, r.b * p.o_stride_b + r.t * p.o_stride_t + h * p.o_stride_h, acc[i]);
    p.lse[r.b * p.lse_stride_b + r.t * p.lse_stride_t + h * p.lse_stride_h] =
        l[i] > 0.0f ? m[i] + log_approx(l[i]) : neg_inf_f32();
  }
}

// A query row of the backward: q, d_out, lse and delta = d_out . out; false when the row saw
// no key (its gradients are 0).
template <class Cfg> struct GradRow {
  float q[Cfg::kHeadDim], d_out[Cfg::kHeadDim];
  float lse, delta;
};

template <class Cfg> EJK_HD bool load_grad_row(const NsaParams& p, i64 b, i64 t, i64 h, GradRow<Cfg>& g, float* scratch) {
  constexpr ElemKind E = Cfg::kElem;
  constexpr int D = Cfg::kHeadDim;
  g.lse = p.lse[b * p.lse_stride_b + t * p.lse_stride_t + h * p.lse_stride_h];
  if (!(g.lse > neg_inf_f32())) return false;
  load<E, D>(p.q, b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h, g.q);
  load<E, D>(p.d_out, b * p.do_stride_b + t * p.do_stride_t + h * p.do_stride_h, g.d_out);
  load<E, D>(p.out, b * p.o_stride_b + t * p.o_stride_t + h * p.o_stride_h, scratch);
  g.delta = dot<D>(g.d_out, scratch);
  return true;
}

// d logit of pair (row, key j) before the scale, and the pair's probability.
template <class Cfg> EJK_HD float pair_grad(const NsaParams& p, const GradRow<Cfg>& g, const float* kj, const float* vj, float& prob) {
  constexpr int D = Cfg::kHeadDim;
  prob = exp_approx(p.scale * dot<D>(g.q, kj) - g.lse);
  return prob * (dot<D>(g.d_out, vj) - g.delta);
}

template <class Cfg> void dq_task(const NsaParams& p, const RowTask& r) {
  constexpr int D = Cfg::kHeadDim, R = int(kNsaRowHeads), BK = int(kNsaKeyTile);
  GradRow<Cfg> g[R];
  bool live[R];
  float dq[R][D], kt[BK][D], vt[BK][D], scratch[D];
  for (int i = 0; i < r.rows; ++i) {
    live[i] = load_grad_row<Cfg>(p, r.b, r.t, r.h0 + i, g[i], scratch);
    for (int d = 0; d < D; ++d) dq[i][d] = 0.0f;
  }
  for_each_tile(p, r, [&](i64 k0, int n) {
    load_tile<Cfg>(p, r.b, r.hk, k0, n, kt, vt);
    for (int i = 0; i < r.rows; ++i) {
      if (!live[i]) continue;
      for (int j = 0; j < n; ++j) {
        float prob;
        const float ds = pair_grad<Cfg>(p, g[i], kt[j], vt[j], prob);
        scale_axpy<D>(dq[i], 1.0f, ds * p.scale, kt[j]);
      }
    }
  });
  for (int i = 0; i < r.rows; ++i)
    store<Cfg::kElem, D>(p.dq, r.b * p.dq_stride_b + r.t * p.dq_stride_t + (r.h0 + i) * p.dq_stride_h, dq[i]);
}

// dk, dv of one tile of key block c: every token from the tile's first key on whose kv group
// selected c, every query head of the group, keys <= the token.
template <class Cfg> void dkv_task(const NsaParams& p, i64 task) {
  constexpr int D = Cfg::kHeadDim, BK = int(kNsaKeyTile);
  const i64 tiles = ceil_div(p.block_size, kNsaKeyTile), blocks = ceil_div(p.seqlen, p.block_size);
  const i64 st = task % tiles, c = task / tiles % blocks, hk = task / (tiles * blocks) % p.heads_kv,
            b = task / (tiles * blocks * p.heads_kv);
  const i64 k0 = c * p.block_size + st * kNsaKeyTile;
  const i64 end = min_of((c + 1) * p.block_size, p.seqlen);
  if (k0 >= end) return;
  const int n = int(min_of(kNsaKeyTile, end - k0));
  float kt[BK][D], vt[BK][D], dk[BK][D], dv[BK][D], scratch[D];
  load_tile<Cfg>(p, b, hk, k0, n, kt, vt);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) dk[j][d] = dv[j][d] = 0.0f;
  const i64 group = p.heads_q / p.heads_kv;
  GradRow<Cfg> g;
  for (i64 t = k0; t < p.seqlen; ++t) {
    if (!nsa_selects(p, b, t, hk, c)) continue;
    const int last = int(min_of<i64>(n - 1, t - k0));
    for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
      if (!load_grad_row<Cfg>(p, b, t, h, g, scratch)) continue;
      for (int j = 0; j <= last; ++j) {
        float prob;
        const float ds = pair_grad<Cfg>(p, g, kt[j], vt[j], prob);
        scale_axpy<D>(dv[j], 1.0f, prob, g.d_out);
        scale_axpy<D>(dk[j], 1.0f, ds * p.scale, g.q);
      }
    }
  }
  for (int j = 0; j < n; ++j) {
    store<Cfg::kElem, D>(p.dk, b * p.dk_stride_b + (k0 + j) * p.dk_stride_t + hk * p.dk_stride_h, dk[j]);
    store<Cfg::kElem, D>(p.dv, b * p.dv_stride_b + (k0 + j) * p.dv_stride_t + hk * p.dv_stride_h, dv[j]);
  }
}

}  // namespace nsa

// Tasks [task_begin, task_end) of nsa_row_tasks(p).
template <class Cfg> void nsa_fwd(const NsaParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) nsa::fwd_task<Cfg>(p, nsa::row_task(p, t));
}

// Tasks [task_begin, task_end) of nsa_row_tasks(p) dq tasks, then nsa_key_tasks(p) dk/dv tasks.
template <class Cfg> void nsa_bwd(const NsaParams& p, long long task_begin, long long task_end) {
  const i64 rows = nsa_row_tasks(p);
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < rows) nsa::dq_task<Cfg>(p, nsa::row_task(p, t));
    else nsa::dkv_task<Cfg>(p, t - rows);
  }
}

}  // namespace ejk::cpu
