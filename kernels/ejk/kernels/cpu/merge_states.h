// The CPU merge of two attention states (the rule: common/merge_states_params.h). A task is a
// run of p.rows_per_task consecutive rows; each row's weights take libm's expf and logf once (a
// call per row costs little beside its head_dim elements), and its elements are blended in SIMD
// vectors of the target's width.
#pragma once
#include "ejk/kernels/common/merge_states_params.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk::cpu {

struct MergeMath {
  EJK_HD float exp(float x) const { return __builtin_expf(x); }
  EJK_HD float log(float x) const { return __builtin_logf(x); }
  EJK_HD float rcp(float x) const { return 1.0f / x; }
};

// f16 vectors through the F16C / AVX-512 conversion instructions, by builtin: g++ 12 turns
// types.h's _Float16 vector conversions into one scalar vcvtph2ps per lane (5x slower here).
// Other types, and targets without F16C, go through types.h.
typedef short vi16 __attribute__((vector_size(2 * kVecWidth)));

template <ElemKind K> EJK_HD vf merge_load(const Elem<K>* p) {
#if defined(__AVX512F__)
  if constexpr (K == ElemKind::f16) {
    vi16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_ia32_vcvtph2ps512_mask(h, vf{}, (unsigned short)0xffff, /*current rounding*/ 4);
  }
#elif defined(__F16C__) && defined(__AVX2__)
  if constexpr (K == ElemKind::f16) {
    vi16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_ia32_vcvtph2ps256(h);
  }
#endif
  return load_f32<K>(p);
}

template <ElemKind K> EJK_HD void merge_store(Elem<K>* p, vf x) {
#if defined(__AVX512F__)
  if constexpr (K == ElemKind::f16) {
    const vi16 h = __builtin_ia32_vcvtps2ph512_mask(x, /*nearest even*/ 0, vi16{}, (unsigned short)0xffff);
    __builtin_memcpy(p, &h, sizeof h);
    return;
  }
#elif defined(__F16C__) && defined(__AVX2__)
  if constexpr (K == ElemKind::f16) {
    const vi16 h = __builtin_ia32_vcvtps2ph256(x, /*nearest even*/ 0);
    __builtin_memcpy(p, &h, sizeof h);
    return;
  }
#endif
  store_from_f32<K>(p, x);
}

// out[i] = the merge of a[i] and b[i] for i < n; out may be a or b itself.
template <ElemKind K>
EJK_HD void merge_row_values(const Elem<K>* a, const Elem<K>* b, Elem<K>* out, i64 n, const MergeWeights<float>& w) {
  i64 i = 0;
  for (; i + kVecWidth <= n; i += kVecWidth)
    merge_store<K>(out + i, merge_value(w, merge_load<K>(a + i), merge_load<K>(b + i)));
  for (; i < n; ++i) out[i] = from_f32<K>(merge_value(w, to_f32<K>(a[i]), to_f32<K>(b[i])));
}

// Rows [task_begin, task_end) * p.rows_per_task, numbered ((lead * T) + t) * H + h: h fastest,
// so consecutive rows of a [..., T, H, D] out are consecutive in memory and the prefetchers
// stream them (t fastest jumped H * D elements per row, a new page each: 4x slower). The LSEs'
// few cache lines of one t serve the next t too. Config::kElem is the element type; Config is a
// type of the variant's own (internal linkage), so objects of different targets never share one
// weak instantiation.
template <class Config>
EJK_HD void merge_states_tasks(const MergeStatesParams& p, i64 task_begin, i64 task_end) {
  constexpr ElemKind K = Config::kElem;
  using E = Elem<K>;
  i64 row = task_begin * p.rows_per_task;
  const i64 end = min_of(task_end * p.rows_per_task, p.rows);
  while (row < end) {
    const i64 lt = row / p.heads, lead = lt / p.tokens, t = lt - lead * p.tokens;
    i64 h = row - lt * p.heads;
    const i64 stop = min_of(p.heads, h + (end - row));  // this (lead, t)'s rows of the task
    row += stop - h;
    const MergeOffsets o = merge_lead_offsets(p, lead);
    for (; h < stop; ++h) {
      const MergeWeights<float> w = merge_weights(p.lse_a[o.lse[0] + h * p.lse_stride_h[0] + t],
                                                  p.lse_b[o.lse[1] + h * p.lse_stride_h[1] + t], MergeMath{});
      p.lse[o.lse[2] + h * p.lse_stride_h[2] + t] = w.lse;
      const i64 at[3] = {o.out[0] + t * p.out_stride_t[0] + h * p.out_stride_h[0],
                         o.out[1] + t * p.out_stride_t[1] + h * p.out_stride_h[1],
                         o.out[2] + t * p.out_stride_t[2] + h * p.out_stride_h[2]};
      merge_row_values<K>(static_cast<const E*>(p.out_a) + at[0], static_cast<const E*>(p.out_b) + at[1],
                          static_cast<E*>(p.out) + at[2], p.head_dim, w);
    }
  }
}

}  // namespace ejk::cpu
