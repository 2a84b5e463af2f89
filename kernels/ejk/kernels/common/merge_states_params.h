// merge_attention_states: its kernels' parameters and the merge rule, defined once for the CPU
// kernel, the CUDA kernel and the float64 reference (specs/merge_attention_states.yaml).
//
// Per row (..., t, h), with A = (out_a, lse_a) and B = (out_b, lse_b) attention over disjoint
// key sets, the result over their union:
//   m   = max(lse_a, lse_b)
//   wa  = exp(lse_a - m),  wb = exp(lse_b - m)
//   out = (wa * out_a + wb * out_b) / (wa + wb)
//   lse = m + log(wa + wb)
// Both LSEs -inf (neither part saw a key): out 0 and lse -inf, never NaN. A side whose weight is
// 0 is left out of the sum rather than multiplied by 0: its out may hold anything (NaN, an
// empty split's unwritten rows), and the other side is taken exactly. A NaN LSE gives NaN.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

// Leading ("...") dims the kernels index after the runtime drops size-1 dims and merges
// neighbours whose strides allow: the output's rank 8 leaves 5 beside (T, H, D).
constexpr int kMergeMaxLead = 5;
// CUDA blocks: threads per block and blocks per SM, the template's launch bounds (64 registers,
// none spilled) and the runtime's grid (one wave of them walks every row); and the chunks of
// each input a lane loads before it needs them (the runtime sizes groups to give it as many).
constexpr int kMergeStatesThreads = 256, kMergeStatesBlocksPerSm = 4, kMergeChunksPerLane = 2;

// Strides are in elements; the head_dim of every out tensor is contiguous, and so is T in the
// LSEs (the binder requires a contiguous last dim).
struct MergeStatesParams {
  const void* out_a;
  const void* out_b;
  void* out;
  const float* lse_a;
  const float* lse_b;
  float* lse;
  i64 tokens, heads, head_dim;  // T, H, D
  i64 rows;                     // lead count * T * H
  i32 lead_rank;                // leading dims after merging, outermost first
  i64 lead_size[kMergeMaxLead];
  // Per tensor (0: a, 1: b, 2: the output): the leading dims', then t's and h's.
  i64 out_lead_stride[3][kMergeMaxLead], out_stride_t[3], out_stride_h[3];
  i64 lse_lead_stride[3][kMergeMaxLead], lse_stride_h[3];
  // CPU: rows per task. CUDA: lanes per row (a power of two <= 32) and elements per access
  // (16 bytes' worth where every out tensor's base and strides allow, else 1).
  i64 rows_per_task;
  i32 lanes_per_row, vec_elems;
};

// Element offsets of a leading index in each tensor: row (t, h) of it is at
// out[k] + t * out_stride_t[k] + h * out_stride_h[k] and lse[k] + h * lse_stride_h[k] + t.
struct MergeOffsets {
  i64 out[3], lse[3];
};

// `lead` numbers the leading dims row-major. I is the type the divisions run in: i64 on the
// CPU; u32 on the GPU, whose 64-bit division is a long subroutine (the runtime launches fewer
// than 2^31 rows there).
template <class I>
EJK_HD MergeOffsets merge_lead_offsets(const MergeStatesParams& p, I lead) {
  MergeOffsets o;
  for (int k = 0; k < 3; ++k) o.out[k] = 0, o.lse[k] = 0;
  for (int d = p.lead_rank - 1; d >= 0; --d) {
    const I size = I(p.lead_size[d]), outer = lead / size;
    const i64 i = i64(lead - outer * size);
    lead = outer;
    for (int k = 0; k < 3; ++k) o.out[k] += i * p.out_lead_stride[k][d], o.lse[k] += i * p.lse_lead_stride[k][d];
  }
  return o;
}

// The two sides' scales and the merged LSE of one row.
template <class T>
struct MergeWeights {
  T scale_a, scale_b, lse;
};

// The weights of one row, in T (float in the kernels, double in the reference), with the
// backend's math: Math::exp, log and rcp (1 / x), as mask.h's transform_logit takes its tanh.
template <class T, class Math>
EJK_HD MergeWeights<T> merge_weights(T lse_a, T lse_b, Math math) {
  const T neg_inf = T(neg_inf_f32());
  if (lse_a == neg_inf && lse_b == neg_inf) return {T(0), T(0), neg_inf};
  // A NaN in either LSE reaches m or a weight, and so every output of the row.
  const T m = lse_a < lse_b ? lse_b : lse_a;
  const T wa = math.exp(lse_a - m), wb = math.exp(lse_b - m);  // one of them is exp(0) = 1
  const T sum = wa + wb, inv = math.rcp(sum);
  return {wa * inv, wb * inv, m + math.log(sum)};
}

// One merged value (V: a scalar or a SIMD vector of them). A side of scale 0 is not read; the
// other side's scale is then 1 (its weight is the sum), so it is taken exactly.
template <class W, class V>
EJK_HD V merge_value(const MergeWeights<W>& w, V a, V b) {
  if (w.scale_b == W(0)) return w.scale_a == W(0) ? V{} : a;
  if (w.scale_a == W(0)) return b;
  return a * w.scale_a + b * w.scale_b;
}

}  // namespace ejk
