// CPU ragged paged attention (semantics: common/ragged_page_params.h).
//
// One task is (query token, kv head): the token's visible positions in tiles of kPageCpuTile,
// each key and value row converted to f32 once for the GQA group's query heads (kPageCpuGroup
// at a time). The row conversion and the dot product are page_attention's.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/ragged_page_params.h"
#include "ejk/kernels/cpu/page_attention.h"

namespace ejk::cpu {

// Heads [h0, h0 + nh) of kv head g for query token t of sequence span.seq.
template <class Cfg>
EJK_HD void ragged_cpu_heads(const RaggedPageParams& p, PageCpuState<Cfg>& st, i64 t, i64 g, i64 h0, int nh,
                             RaggedSpan span) {
  constexpr int kPad = PageCpuState<Cfg>::kPad;
  const float neg_inf = neg_inf_f32();
  for (int h = 0; h < nh; ++h) {
    page_cpu_row<Cfg>(st.q[h], p.q, t * p.q_st + (h0 + h) * p.q_sh);
    for (int d = 0; d < kPad; ++d) st.acc[h][d] = 0.0f;
    st.m[h] = neg_inf, st.l[h] = 0.0f;
  }
  const i64 s = span.seq;
  for (i64 t0 = span.begin; t0 < span.end; t0 += kPageCpuTile) {
    const int n = (int)min_of((i64)kPageCpuTile, span.end - t0);
    for (int i = 0; i < n; ++i) {
      const i64 j = t0 + i;
      page_cpu_row<Cfg>(st.row, p.k, ragged_page_of(p, s, j) * p.k_sp + (j % p.page_size) * p.k_ss + g * p.k_sh);
      for (int h = 0; h < nh; ++h) {
        float x = page_cpu_dot<Cfg>(st.q[h], st.row) * p.scale;
        if (p.alibi != nullptr || p.qq_bias != nullptr) x += ragged_bias(p, span, h0 + h, j);
        if (p.softcap > 0.0f) x = p.softcap * tanh_approx<float>(x / p.softcap);
        st.score[h][i] = x;
      }
    }
    for (int h = 0; h < nh; ++h) {
      float mt = st.m[h];
      for (int i = 0; i < n; ++i) mt = st.score[h][i] > mt ? st.score[h][i] : mt;
      // mt is finite (the tile has a position), so exp(-inf - mt) gives 0 on the first tile.
      const float alpha = exp_approx<float>(st.m[h] - mt);
      float sum = 0.0f;
      for (int i = 0; i < n; ++i) sum += (st.score[h][i] = exp_approx<float>(st.score[h][i] - mt));
      st.l[h] = st.l[h] * alpha + sum, st.m[h] = mt;
      for (int d = 0; d < kPad; d += kVecWidth) vstore(st.acc[h] + d, vload(st.acc[h] + d) * alpha);
    }
    for (int i = 0; i < n; ++i) {
      const i64 j = t0 + i;
      page_cpu_row<Cfg>(st.row, p.v, ragged_page_of(p, s, j) * p.v_sp + (j % p.page_size) * p.v_ss + g * p.v_sh);
      for (int h = 0; h < nh; ++h) {
        const vf w = splat<vf>(st.score[h][i]);
        for (int d = 0; d < kPad; d += kVecWidth) vstore(st.acc[h] + d, vload(st.acc[h] + d) + w * vload(st.row + d));
      }
    }
  }
  for (int h = 0; h < nh; ++h) {
    // The sink joins the denominator only; both are rescaled to the larger of the running max
    // and the sink, so a large sink cannot overflow. Nothing visible (l = 0) leaves 0.
    float inv = 0.0f;
    if (st.l[h] > 0.0f) {
      float keep = 1.0f, l = st.l[h];
      if (p.sinks != nullptr) {
        const float sink = p.sinks[h0 + h], mx = sink > st.m[h] ? sink : st.m[h];
        keep = exp_approx<float>(st.m[h] - mx);
        l = l * keep + exp_approx<float>(sink - mx);
      }
      inv = keep / l;
    }
    Elem<Cfg::kElem>* o = static_cast<Elem<Cfg::kElem>*>(p.out) + t * p.o_st + (h0 + h) * p.o_sh;
    for (int d = 0; d < Cfg::kD; ++d) o[d] = from_f32<Cfg::kElem>(st.acc[h][d] * inv);
    if (p.lse != nullptr)
      p.lse[t * p.lse_st + (h0 + h) * p.lse_sh] = ragged_row_lse(
          p, h0 + h, st.m[h], st.l[h], [](float x) { return log_approx(x); }, [](float x) { return exp_approx<float>(x); });
  }
}

template <class Cfg>
EJK_HD void ragged_page_tasks(const RaggedPageParams& p, i64 task_begin, i64 task_end) {
  PageCpuState<Cfg> st;
  const i64 group = p.q_heads / p.kv_heads;
  for (i64 task = task_begin; task < task_end; ++task) {
    const i64 t = task / p.kv_heads, g = task % p.kv_heads;
    const RaggedSpan span = ragged_span(p, t);
    for (i64 h0 = 0; h0 < group; h0 += kPageCpuGroup)
      ragged_cpu_heads<Cfg>(p, st, t, g, g * group + h0, (int)min_of((i64)kPageCpuGroup, group - h0), span);
  }
}

}  // namespace ejk::cpu
