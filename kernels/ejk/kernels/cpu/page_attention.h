// CPU page_attention (semantics: common/page_attention_params.h).
//
// One task is (sequence, kv head): the task walks the sequence's visible positions in tiles of
// kPageCpuTile, converting each key and value row to f32 once for every query head of the GQA
// group (heads taken kPageCpuGroup at a time), so each page is read once per group. Per tile:
// the group's scores, one rescale of the running sums per head, then the values.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/page_attention_params.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

inline constexpr int kPageCpuTile = 32, kPageCpuGroup = 8;

// Cfg: kElem, kD.
template <class Cfg> struct PageCpuState {
  static constexpr int kPad = (Cfg::kD + kVecWidth - 1) / kVecWidth * kVecWidth;
  float q[kPageCpuGroup][kPad];
  float acc[kPageCpuGroup][kPad];
  float row[kPad];
  float score[kPageCpuGroup][kPageCpuTile];
  float m[kPageCpuGroup], l[kPageCpuGroup];
};

// Row `src` (D elements) as f32 into dst, zero-padded to kPad.
template <class Cfg>
EJK_HD void page_cpu_row(float* dst, const void* base, i64 offset) {
  constexpr int kPad = PageCpuState<Cfg>::kPad;
  convert_row<Cfg::kElem>(static_cast<const Elem<Cfg::kElem>*>(base) + offset, dst, Cfg::kD);
  for (int d = Cfg::kD; d < kPad; ++d) dst[d] = 0.0f;
}

// Four accumulators: one chain of dependent adds would wait on each add's latency.
template <class Cfg>
EJK_HD float page_cpu_dot(const float* a, const float* b) {
  constexpr int kPad = PageCpuState<Cfg>::kPad;
  vf sum[4] = {splat<vf>(0.0f), splat<vf>(0.0f), splat<vf>(0.0f), splat<vf>(0.0f)};
  int d = 0;
  for (; d + 4 * kVecWidth <= kPad; d += 4 * kVecWidth)
    for (int u = 0; u < 4; ++u) sum[u] += vload(a + d + u * kVecWidth) * vload(b + d + u * kVecWidth);
  for (; d < kPad; d += kVecWidth) sum[0] += vload(a + d) * vload(b + d);
  return reduce_add((sum[0] + sum[1]) + (sum[2] + sum[3]));
}

// Heads [h0, h0 + nh) of kv head g of sequence s, over positions [begin, end).
template <class Cfg>
EJK_HD void page_cpu_heads(const PageAttentionParams& p, PageCpuState<Cfg>& st, i64 s, i64 g, i64 h0, int nh,
                           PageSpan span) {
  constexpr int kPad = PageCpuState<Cfg>::kPad;
  const float neg_inf = neg_inf_f32();
  for (int h = 0; h < nh; ++h) {
    page_cpu_row<Cfg>(st.q[h], p.q, s * p.q_ss + (h0 + h) * p.q_sh);
    for (int d = 0; d < kPad; ++d) st.acc[h][d] = 0.0f;
    st.m[h] = neg_inf, st.l[h] = 0.0f;
  }
  for (i64 t0 = span.begin; t0 < span.end; t0 += kPageCpuTile) {
    const int n = (int)min_of((i64)kPageCpuTile, span.end - t0);
    for (int i = 0; i < n; ++i) {
      const i64 j = t0 + i;
      page_cpu_row<Cfg>(st.row, p.k_cache, page_block(p, s, j) * p.k_sb + g * p.k_sh + (j % p.block_size) * p.k_st);
      for (int h = 0; h < nh; ++h) {
        float x = page_cpu_dot<Cfg>(st.q[h], st.row) * p.scale;
        if (p.softcap > 0.0f) x = p.softcap * tanh_approx<float>(x / p.softcap);
        st.score[h][i] = x;
      }
    }
    for (int h = 0; h < nh; ++h) {
      float mt = st.m[h];
      for (int i = 0; i < n; ++i) mt = st.score[h][i] > mt ? st.score[h][i] : mt;
      // mt is finite here (the tile has a position), so exp(-inf - mt) gives 0 on the first tile.
      const float alpha = exp_approx<float>(st.m[h] - mt);
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) sum += (st.score[h][i] = exp_approx<float>(st.score[h][i] - mt));
      st.l[h] = st.l[h] * alpha + sum, st.m[h] = mt;
      for (int d = 0; d < kPad; d += kVecWidth) vstore(st.acc[h] + d, vload(st.acc[h] + d) * alpha);
    }
    for (int i = 0; i < n; ++i) {
      const i64 j = t0 + i;
      page_cpu_row<Cfg>(st.row, p.v_cache, page_block(p, s, j) * p.v_sb + g * p.v_sh + (j % p.block_size) * p.v_st);
      for (int h = 0; h < nh; ++h) {
        const vf w = splat<vf>(st.score[h][i]);
        for (int d = 0; d < kPad; d += kVecWidth) vstore(st.acc[h] + d, vload(st.acc[h] + d) + w * vload(st.row + d));
      }
    }
  }
  for (int h = 0; h < nh; ++h) {
    const float inv = st.l[h] > 0.0f ? 1.0f / st.l[h] : 0.0f;  // no visible position: 0
    Elem<Cfg::kElem>* o = static_cast<Elem<Cfg::kElem>*>(p.out) + s * p.o_ss + (h0 + h) * p.o_sh;
    for (int d = 0; d < Cfg::kD; ++d) o[d] = from_f32<Cfg::kElem>(st.acc[h][d] * inv);
  }
}

template <class Cfg>
EJK_HD void page_attention_tasks(const PageAttentionParams& p, i64 task_begin, i64 task_end) {
  PageCpuState<Cfg> st;
  const i64 group = p.q_heads / p.kv_heads;
  for (i64 t = task_begin; t < task_end; ++t) {
    const i64 s = t / p.kv_heads, g = t % p.kv_heads;
    const PageSpan span = page_span(p, s);
    for (i64 h0 = 0; h0 < group; h0 += kPageCpuGroup)
      page_cpu_heads<Cfg>(p, st, s, g, g * group + h0, (int)min_of((i64)kPageCpuGroup, group - h0), span);
  }
}

}  // namespace ejk::cpu
