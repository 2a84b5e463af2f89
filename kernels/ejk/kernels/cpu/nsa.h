// CPU selection attention of native sparse attention, forward and backward (the math:
// common/nsa_params.h). A row task holds up to kNsaRowHeads query heads of one token's kv group
// (they share the token's blocks) and walks the selected blocks in tiles of kNsaKeyTile keys,
// K and V converted to f32 (and K transposed) once per tile for all its heads: logits vectorize
// over the tile's keys, the weighted sums of rows over the head dim with the sums in registers. The backward's dk/dv task owns a
// tile of one key block and scans the later tokens for those that selected the block, batching
// their rows; each output element is written by one task in a fixed order (no atomics, results
// independent of threads).
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

template <ElemKind K, int D> EJK_HD void load(const void* base, i64 at, float* dst) {
  convert_row<K>(static_cast<const Elem<K>*>(base) + at, dst, D);
}

template <ElemKind K, int D> EJK_HD void store(void* base, i64 at, const float* x) {
  Elem<K>* dst = static_cast<Elem<K>*>(base) + at;
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) store_from_f32<K>(dst + d, vload(x + d));
  for (; d < D; ++d) dst[d] = from_f32<K>(x[d]);
}

// Keys [k0, k0 + n) of kv head hk in sequence b as f32 rows (rows) and, where asked, the tile
// transposed ([D][kNsaKeyTile], zero past n), whose columns vectorize over keys.
template <class Cfg> struct Tile {
  static constexpr int D = Cfg::kHeadDim, BK = int(kNsaKeyTile);
  float k[BK][D], v[BK][D];
  float kt[D][BK], vt[D][BK];
  int n;
};

template <class Cfg>
EJK_HD void load_tile(const NsaParams& p, i64 b, i64 hk, i64 k0, int n, Tile<Cfg>& tl, bool transpose_v) {
  constexpr int D = Cfg::kHeadDim, BK = int(kNsaKeyTile);
  tl.n = n;
  for (int j = 0; j < n; ++j) {
    load<Cfg::kElem, D>(p.k, b * p.k_stride_b + (k0 + j) * p.k_stride_t + hk * p.k_stride_h, tl.k[j]);
    load<Cfg::kElem, D>(p.v, b * p.v_stride_b + (k0 + j) * p.v_stride_t + hk * p.v_stride_h, tl.v[j]);
  }
  const int padded = int(ceil_div<i64>(n, kVecWidth)) * kVecWidth;
  for (int d = 0; d < D; ++d) {
    for (int j = 0; j < n; ++j) tl.kt[d][j] = tl.k[j][d];
    for (int j = n; j < padded && j < BK; ++j) tl.kt[d][j] = 0.0f;
  }
  if (!transpose_v) return;
  for (int d = 0; d < D; ++d) {
    for (int j = 0; j < n; ++j) tl.vt[d][j] = tl.v[j][d];
    for (int j = n; j < padded && j < BK; ++j) tl.vt[d][j] = 0.0f;
  }
}

// s[j] = c * x . col_j of a transposed tile for j < n, vectorized over the tile's keys (one
// accumulator per vector of keys, the head dim walked once).
template <int D> EJK_HD void row_times_tile(const float* x, const float (*t)[kNsaKeyTile], int n, float c, float* s) {
  constexpr int V = int(kNsaKeyTile) / kVecWidth;
  const int nv = int(ceil_div<i64>(n, kVecWidth));
  vf acc[V];
  for (int u = 0; u < V; ++u) acc[u] = splat<vf>(0.0f);
  for (int d = 0; d < D; ++d) {
    const vf xd = splat<vf>(x[d]);
    for (int u = 0; u < nv; ++u) acc[u] += xd * vload(&t[d][u * kVecWidth]);
  }
  const vf cv = splat<vf>(c);
  for (int u = 0; u < nv; ++u) vstore(s + u * kVecWidth, acc[u] * cv);
}

// y = c * y + sum over j < n of w[j] * rows[j], y held in registers across the keys.
template <int D> EJK_HD void weighted_rows(float* y, float c, const float* w, const float (*rows)[D], int n) {
  constexpr int V = D / kVecWidth;
  if constexpr (V == 0) {
    for (int d = 0; d < D; ++d) {
      float a = y[d] * c;
      for (int j = 0; j < n; ++j) a += w[j] * rows[j][d];
      y[d] = a;
    }
  } else {
    vf a[V];
    const vf cv = splat<vf>(c);
    for (int u = 0; u < V; ++u) a[u] = vload(y + u * kVecWidth) * cv;
    float tail[D - V * kVecWidth + 1];
    for (int d = V * kVecWidth; d < D; ++d) tail[d - V * kVecWidth] = y[d] * c;
    for (int j = 0; j < n; ++j) {
      const vf wj = splat<vf>(w[j]);
      for (int u = 0; u < V; ++u) a[u] += wj * vload(rows[j] + u * kVecWidth);
      for (int d = V * kVecWidth; d < D; ++d) tail[d - V * kVecWidth] += w[j] * rows[j][d];
    }
    for (int u = 0; u < V; ++u) vstore(y + u * kVecWidth, a[u]);
    for (int d = V * kVecWidth; d < D; ++d) y[d] = tail[d - V * kVecWidth];
  }
}

// e[j] = exp(s[j] - m) for j < n, in vectors (the tile's padding lanes computed and ignored).
EJK_HD void exp_shifted(float* s, int n, float m) {
  const int nv = int(ceil_div<i64>(n, kVecWidth));
  const vf mv = splat<vf>(m);
  for (int u = 0; u < nv; ++u) vstore(s + u * kVecWidth, exp_approx(vload(s + u * kVecWidth) - mv));
}

template <class Cfg> void fwd_task(const NsaParams& p, const NsaRowTask& r) {
  constexpr ElemKind E = Cfg::kElem;
  constexpr int D = Cfg::kHeadDim, R = int(kNsaRowHeads), BK = int(kNsaKeyTile);
  float q[R][D], acc[R][D], m[R], l[R], s[BK];
  Tile<Cfg> tl;
  for (int i = 0; i < r.rows; ++i) {
    load<E, D>(p.q, r.b * p.q_stride_b + r.t * p.q_stride_t + (r.h0 + i) * p.q_stride_h, q[i]);
    for (int d = 0; d < D; ++d) acc[i][d] = 0.0f;
    m[i] = neg_inf_f32(), l[i] = 0.0f;
  }
  nsa_for_each_tile(p, r, [&](i64 k0, int n) {
    load_tile<Cfg>(p, r.b, r.hk, k0, n, tl, false);
    for (int i = 0; i < r.rows; ++i) {
      row_times_tile<D>(q[i], tl.kt, n, p.scale, s);
      float mx = m[i];
      for (int j = 0; j < n; ++j) mx = max_of(mx, s[j]);
      // Online softmax: rescale what came before to the new running max.
      const float corr = exp_approx(m[i] - mx);
      exp_shifted(s, n, mx);
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += s[j];
      l[i] = l[i] * corr + sum;
      m[i] = mx;
      weighted_rows<D>(acc[i], corr, s, tl.v, n);
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

// A query row of the backward: q, d_out, lse and delta = d_out . out - d_lse (d lse / d s_j is
// P_j, so d_lse enters every logit's gradient as -delta does); false when the row saw no key
// (its gradients are 0).
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
  g.delta = row_dot<D>(g.d_out, scratch);
  if (p.d_lse) g.delta -= p.d_lse[b * p.dl_stride_b + t * p.dl_stride_t + h * p.dl_stride_h];
  return true;
}

// For the tile's keys j < n: prob[j] = P_j and ds[j] = scale * P_j (d_out . v_j - delta), the
// gradient of q . k_j.
template <class Cfg>
EJK_HD void tile_grads(const NsaParams& p, const GradRow<Cfg>& g, const Tile<Cfg>& tl, float* prob, float* ds) {
  constexpr int D = Cfg::kHeadDim;
  row_times_tile<D>(g.q, tl.kt, tl.n, p.scale, prob);
  exp_shifted(prob, tl.n, g.lse);
  row_times_tile<D>(g.d_out, tl.vt, tl.n, 1.0f, ds);
  const int nv = int(ceil_div<i64>(tl.n, kVecWidth));
  const vf delta = splat<vf>(g.delta), sc = splat<vf>(p.scale);
  for (int u = 0; u < nv; ++u) {
    const vf pr = vload(prob + u * kVecWidth);
    vstore(ds + u * kVecWidth, pr * (vload(ds + u * kVecWidth) - delta) * sc);
  }
}

template <class Cfg> void dq_task(const NsaParams& p, const NsaRowTask& r) {
  constexpr int D = Cfg::kHeadDim, R = int(kNsaRowHeads), BK = int(kNsaKeyTile);
  GradRow<Cfg> g[R];
  bool live[R];
  float dq[R][D], scratch[D], prob[BK], ds[BK];
  Tile<Cfg> tl;
  for (int i = 0; i < r.rows; ++i) {
    live[i] = load_grad_row<Cfg>(p, r.b, r.t, r.h0 + i, g[i], scratch);
    for (int d = 0; d < D; ++d) dq[i][d] = 0.0f;
  }
  nsa_for_each_tile(p, r, [&](i64 k0, int n) {
    load_tile<Cfg>(p, r.b, r.hk, k0, n, tl, true);
    for (int i = 0; i < r.rows; ++i) {
      if (!live[i]) continue;
      tile_grads<Cfg>(p, g[i], tl, prob, ds);
      weighted_rows<D>(dq[i], 1.0f, ds, tl.k, n);
    }
  });
  for (int i = 0; i < r.rows; ++i)
    store<Cfg::kElem, D>(p.dq, r.b * p.dq_stride_b + r.t * p.dq_stride_t + (r.h0 + i) * p.dq_stride_h, dq[i]);
}

// Query rows gathered for a dk/dv tile: each row's q and d_out, and per key its P and ds
// (key-major, 0 past the keys the row sees), flushed into dk and dv kNsaRowHeads rows at a time
// so each key's accumulators stay in registers across the rows.
template <class Cfg> struct RowBatch {
  static constexpr int D = Cfg::kHeadDim, R = int(kNsaRowHeads), BK = int(kNsaKeyTile);
  float q[R][D], d_out[R][D];
  float prob[BK][R], ds[BK][R];
  int rows = 0;
};

template <class Cfg> EJK_HD void flush(RowBatch<Cfg>& rb, int n, float (*dk)[Cfg::kHeadDim], float (*dv)[Cfg::kHeadDim]) {
  constexpr int D = Cfg::kHeadDim;
  for (int j = 0; j < n; ++j) {
    weighted_rows<D>(dv[j], 1.0f, rb.prob[j], rb.d_out, rb.rows);
    weighted_rows<D>(dk[j], 1.0f, rb.ds[j], rb.q, rb.rows);
  }
  rb.rows = 0;
}

// dk, dv of one tile of key block c: every token from the tile's first key on whose kv group
// selected c, every query head of the group, keys <= the token.
template <class Cfg> void dkv_task(const NsaParams& p, i64 task) {
  constexpr int D = Cfg::kHeadDim, BK = int(kNsaKeyTile), R = int(kNsaRowHeads);
  const i64 tiles = ceil_div(p.block_size, kNsaKeyTile), blocks = ceil_div(p.seqlen, p.block_size);
  const i64 st = task % tiles, c = task / tiles % blocks, hk = task / (tiles * blocks) % p.heads_kv,
            b = task / (tiles * blocks * p.heads_kv);
  const i64 k0 = c * p.block_size + st * kNsaKeyTile;
  const i64 end = min_of((c + 1) * p.block_size, p.seqlen);
  if (k0 >= end) return;
  const int n = int(min_of(kNsaKeyTile, end - k0));
  float dk[BK][D], dv[BK][D], scratch[D], prob[BK], ds[BK];
  Tile<Cfg> tl;
  RowBatch<Cfg> rb;
  load_tile<Cfg>(p, b, hk, k0, n, tl, true);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) dk[j][d] = dv[j][d] = 0.0f;
  const i64 group = p.heads_q / p.heads_kv;
  GradRow<Cfg> g;
  for (i64 t = k0; t < p.seqlen; ++t) {
    if (!nsa_selects(p, b, t, hk, c)) continue;
    const int last = int(min_of<i64>(n - 1, t - k0));
    for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
      if (!load_grad_row<Cfg>(p, b, t, h, g, scratch)) continue;
      tile_grads<Cfg>(p, g, tl, prob, ds);
      const int r = rb.rows++;
      for (int d = 0; d < D; ++d) rb.q[r][d] = g.q[d], rb.d_out[r][d] = g.d_out[d];
      for (int j = 0; j < n; ++j) rb.prob[j][r] = j <= last ? prob[j] : 0.0f, rb.ds[j][r] = j <= last ? ds[j] : 0.0f;
      if (rb.rows == R) flush<Cfg>(rb, n, dk, dv);
    }
  }
  if (rb.rows > 0) flush<Cfg>(rb, n, dk, dv);
  for (int j = 0; j < n; ++j) {
    store<Cfg::kElem, D>(p.dk, b * p.dk_stride_b + (k0 + j) * p.dk_stride_t + hk * p.dk_stride_h, dk[j]);
    store<Cfg::kElem, D>(p.dv, b * p.dv_stride_b + (k0 + j) * p.dv_stride_t + hk * p.dv_stride_h, dv[j]);
  }
}

}  // namespace nsa

// Tasks [task_begin, task_end) of nsa_row_tasks(p).
template <class Cfg> void nsa_fwd(const NsaParams& p, long long task_begin, long long task_end) {
  for (long long t = task_begin; t < task_end; ++t) nsa::fwd_task<Cfg>(p, nsa_row_task(p, t));
}

// Tasks [task_begin, task_end) of nsa_row_tasks(p) dq tasks, then nsa_key_tasks(p) dk/dv tasks.
template <class Cfg> void nsa_bwd(const NsaParams& p, long long task_begin, long long task_end) {
  const i64 rows = nsa_row_tasks(p);
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < rows) nsa::dq_task<Cfg>(p, nsa_row_task(p, t));
    else nsa::dkv_task<Cfg>(p, t - rows);
  }
}

}  // namespace ejk::cpu
