// CPU multi-head latent attention over a paged latent cache (semantics: common/mla_page_params.h).
//
// One task is (query token, block of up to kMlaCpuHeads query heads). Every head reads the same
// latent rows, so the task converts a tile of kMlaCpuTile positions ([c, k_pe] each) to f32 once
// and uses it for all its heads twice: as keys (scores against [q_nope, q_pe], two heads by four
// rows at a time) and, its first R columns, as values. The [heads, R] accumulator is updated by
// column chunks, the tile's rows streamed through each chunk for every head while the chunk
// stays in L1.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mla_page_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

inline constexpr int kMlaCpuTile = 16;

// Cfg: kElem, kR (latent dim), kE (rope dim).
template <class Cfg> struct MlaCpuState {
  static constexpr int kRp = (Cfg::kR + kVecWidth - 1) / kVecWidth * kVecWidth;
  static constexpr int kEp = (Cfg::kE + kVecWidth - 1) / kVecWidth * kVecWidth;
  static constexpr int kW = kRp + kEp;  // a row: c zero-padded to kRp, then k_pe to kEp
  float q[kMlaCpuHeads][kW];
  float kv[kMlaCpuTile][kW];
  float acc[kMlaCpuHeads][kRp];
  float score[kMlaCpuHeads][kMlaCpuTile];
  float m[kMlaCpuHeads], l[kMlaCpuHeads], alpha[kMlaCpuHeads];
};

// n elements at base + offset as f32 into dst, zero-padded to pad.
template <ElemKind K>
EJK_HD void mla_cpu_load(float* dst, const void* base, i64 offset, int n, int pad) {
  convert_row<K>(static_cast<const Elem<K>*>(base) + offset, dst, n);
  for (int d = n; d < pad; ++d) dst[d] = 0.0f;
}

// acc[h] = alpha[h] * acc[h] + sum_i score[h][i] * c_i over the tile's n rows, four vectors of
// columns at a time (independent chains) and the remainder one vector at a time.
template <class Cfg>
EJK_HD void mla_cpu_values(MlaCpuState<Cfg>& st, int nh, int n) {
  constexpr int kRp = MlaCpuState<Cfg>::kRp, kStep = 4 * kVecWidth;
  int d = 0;
  for (; d + kStep <= kRp; d += kStep)
    for (int h = 0; h < nh; ++h) {
      const vf a = splat<vf>(st.alpha[h]);
      vf x[4];
      for (int u = 0; u < 4; ++u) x[u] = vload(st.acc[h] + d + u * kVecWidth) * a;
      for (int i = 0; i < n; ++i) {
        const vf w = splat<vf>(st.score[h][i]);
        for (int u = 0; u < 4; ++u) x[u] += w * vload(st.kv[i] + d + u * kVecWidth);
      }
      for (int u = 0; u < 4; ++u) vstore(st.acc[h] + d + u * kVecWidth, x[u]);
    }
  for (; d < kRp; d += kVecWidth)
    for (int h = 0; h < nh; ++h) {
      vf x = vload(st.acc[h] + d) * splat<vf>(st.alpha[h]);
      for (int i = 0; i < n; ++i) x += splat<vf>(st.score[h][i]) * vload(st.kv[i] + d);
      vstore(st.acc[h] + d, x);
    }
}

// The tile's scores for every head, then the online-softmax step: score becomes exp(x - m),
// alpha the rescale of what was summed before.
template <class Cfg>
EJK_HD void mla_cpu_scores(const MlaPageParams& p, MlaCpuState<Cfg>& st, int nh, int n) {
  constexpr int kW = MlaCpuState<Cfg>::kW;
  // Dots of two heads against four rows at a time: eight independent chains, and 6 loads per
  // 8 products instead of 2 per product. Rows past n (zeros) are computed and never read.
  for (int h = 0; h < nh; h += 2) {
    const float* q1 = st.q[h + 1 < nh ? h + 1 : h];
    for (int i = 0; i < n; i += 4) {
      vf a[4], b[4];
      for (int u = 0; u < 4; ++u) a[u] = splat<vf>(0.0f), b[u] = splat<vf>(0.0f);
      for (int d = 0; d < kW; d += kVecWidth) {
        const vf x0 = vload(st.q[h] + d), x1 = vload(q1 + d);
        for (int u = 0; u < 4; ++u) {
          const vf k = vload(st.kv[i + u] + d);
          a[u] += x0 * k, b[u] += x1 * k;
        }
      }
      for (int u = 0; u < 4; ++u) st.score[h][i + u] = reduce_add(a[u]);
      if (h + 1 < nh)
        for (int u = 0; u < 4; ++u) st.score[h + 1][i + u] = reduce_add(b[u]);
    }
  }
  for (int h = 0; h < nh; ++h) {
    float mt = st.m[h];
    for (int i = 0; i < n; ++i) {
      float x = st.score[h][i] * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * tanh_approx<float>(x / p.softcap);
      st.score[h][i] = x;
      mt = x > mt ? x : mt;
    }
    // mt is finite (the tile has a position), so exp(-inf - mt) gives 0 on the first tile.
    st.alpha[h] = exp_approx<float>(st.m[h] - mt);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += (st.score[h][i] = exp_approx<float>(st.score[h][i] - mt));
    st.l[h] = st.l[h] * st.alpha[h] + sum, st.m[h] = mt;
  }
}

// Heads [h0, h0 + nh) of query token t.
template <class Cfg>
EJK_HD void mla_cpu_heads(const MlaPageParams& p, MlaCpuState<Cfg>& st, i64 t, i64 h0, int nh, const MlaSpan& span) {
  using S = MlaCpuState<Cfg>;
  constexpr ElemKind K = Cfg::kElem;
  for (int h = 0; h < nh; ++h) {
    mla_cpu_load<K>(st.q[h], p.q_nope, t * p.qn_st + (h0 + h) * p.qn_sh, Cfg::kR, S::kRp);
    mla_cpu_load<K>(st.q[h] + S::kRp, p.q_pe, t * p.qp_st + (h0 + h) * p.qp_sh, Cfg::kE, S::kEp);
    for (int d = 0; d < S::kRp; ++d) st.acc[h][d] = 0.0f;
    st.m[h] = neg_inf_f32(), st.l[h] = 0.0f;
  }
  for (i64 j0 = span.begin; j0 < span.end; j0 += kMlaCpuTile) {
    const int n = (int)min_of((i64)kMlaCpuTile, span.end - j0);
    for (int i = 0; i < n; ++i) {
      const MlaRow r = mla_row(p, span, j0 + i);
      mla_cpu_load<K>(st.kv[i], r.fresh ? p.new_c : p.cache, r.c, Cfg::kR, S::kRp);
      mla_cpu_load<K>(st.kv[i] + S::kRp, r.fresh ? p.new_pe : p.cache, r.pe, Cfg::kE, S::kEp);
    }
    for (int i = n; i < ((n + 3) & ~3); ++i)  // the scores' last group of four rows
      for (int d = 0; d < S::kW; ++d) st.kv[i][d] = 0.0f;
    mla_cpu_scores<Cfg>(p, st, nh, n);
    mla_cpu_values<Cfg>(st, nh, n);
  }
  for (int h = 0; h < nh; ++h) {
    const float inv = st.l[h] > 0.0f ? p.v_scale / st.l[h] : 0.0f;  // nothing visible: 0
    Elem<K>* o = static_cast<Elem<K>*>(p.out) + t * p.o_st + (h0 + h) * p.o_sh;
    for (int d = 0; d < Cfg::kR; ++d) o[d] = from_f32<K>(st.acc[h][d] * inv);
  }
}

template <class Cfg>
EJK_HD void mla_page_tasks(const MlaPageParams& p, i64 task_begin, i64 task_end) {
  MlaCpuState<Cfg> st;
  const i64 blocks = mla_cpu_head_blocks(p.q_heads);
  for (i64 task = task_begin; task < task_end; ++task) {
    const i64 t = task / blocks, h0 = (task % blocks) * kMlaCpuHeads;
    mla_cpu_heads<Cfg>(p, st, t, h0, (int)min_of((i64)kMlaCpuHeads, p.q_heads - h0), mla_span(p, t));
  }
}

}  // namespace ejk::cpu
