// Logit transform, masking and the online softmax of one kv block, on the transposed score
// block st[key][query] that the kernel's Q.K^T product produces. With queries along the vector
// lanes, the row max and row sum of the softmax are plain lane-wise max/add down the keys: no
// horizontal reductions.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

EJK_HD vi vload_i32(const i32* p) {
  vi v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

// Running softmax statistics of kRows queries, kept as vectors of queries.
// m is the reference the probabilities are taken against: with a rescale threshold tau it
// only moves when a block's max exceeds it by more than tau, so p = exp(logit - m) stays below
// e^tau and the output rows need no rescaling most of the time. out = O / l and
// lse = m + log(l) hold for any such m.
template <int kRows> struct SoftmaxState {
  static constexpr int kVecs = kRows / kVecWidth;
  vf m[kVecs];     // reference max of the visible logits (-inf: none seen yet)
  vf l[kVecs];     // running sum of exp(logit - m)
  vf seen[kVecs];  // true max of the visible logits (the unnormalized output is relative to it)
  float alpha[kRows];  // factor the output rows must be scaled by before adding this block

  EJK_HD void reset() {
#pragma GCC unroll 16
    for (int v = 0; v < kVecs; ++v) {
      m[v] = seen[v] = splat<vf>(neg_inf_f32());
      l[v] = vf{};
    }
  }
};

// Visible key range [lo, hi] of each query row, from mask.h's first/last_visible_key, clamped
// to [-1, seqlen_k] so it fits in 32 bits. Rows past the end copy the last real row, which
// keeps them harmless and the ranges monotone.
template <int kRows> struct RowRanges {
  i32 lo[kRows], hi[kRows];

  EJK_HD void init(const MaskSpec& mask, i64 q0, int rows, i64 seqlen_k) {
    for (int i = 0; i < kRows; ++i) {
      const i64 q = q0 + (i < rows ? i : rows - 1);
      lo[i] = (i32)min_of(max_of(first_visible_key(q, mask), (i64)-1), seqlen_k);
      hi[i] = (i32)min_of(max_of(last_visible_key(q, mask), (i64)-1), seqlen_k);
    }
  }
};

// st[j][i] = transform_logit(st[j][i], bias[i][j]) for j < kn (mask.h's order: bias, softcap).
// Written per element with mask.h's own function; the compilers vectorize the softcap-only loop
// (FastTanh is branch-free). Bias is read transposed, one scalar per logit.
template <bool kBias, bool kSoftcap, ElemKind K, int kRows>
EJK_HD void transform_logits(float* st, int kn, int rows, const Elem<K>* bias, i64 bias_stride_q,
                             float cap) {
  const float inv_cap = kSoftcap ? 1.0f / cap : 0.0f;
  if constexpr (kBias) {
    for (int i = 0; i < rows; ++i) {
      const Elem<K>* brow = bias + i * bias_stride_q;
      for (int j = 0; j < kn; ++j)
        st[j * kRows + i] = transform_logit<true, kSoftcap>(st[j * kRows + i], to_f32<K>(brow[j]),
                                                            cap, inv_cap, FastTanh{});
    }
  } else if constexpr (kSoftcap) {
    for (int j = 0; j < kn; ++j)
      for (int i = 0; i < kRows; ++i)
        st[j * kRows + i] =
            transform_logit<false, true>(st[j * kRows + i], 0.0f, cap, inv_cap, FastTanh{});
  }
}

// st *= scale for the first kn rows (engines whose product cannot pre-scale Q).
template <int kRows> EJK_HD void scale_scores(float* st, int kn, float scale) {
  for (int i = 0; i < kn * kRows; i += kVecWidth) vstore(st + i, vload(st + i) * scale);
}

// Sets st[j][i] = -inf where mask.h's segment_visible says the pair is not visible.
template <int kRows>
EJK_HD void mask_segments(float* st, int kn, int rows, const i32* q_seg, const i32* kv_seg) {
  for (int j = 0; j < kn; ++j)
    for (int i = 0; i < rows; ++i)
      if (!segment_visible(q_seg[i], kv_seg[j])) st[j * kRows + i] = neg_inf_f32();
}

// The last pass of the softmax as a policy: turns the raw scores of one vector of queries
// (column v of st, kn keys) into probabilities p = exp(s * scale - m) and returns their sum.
// This one writes them back in place (FMA engine); the AMX engine's packs bf16 tiles.
template <int kRows> struct InPlaceProbabilities {
  float* st;
  EJK_HD vf operator()(int v, int kn, vf scale, vf m) const {
    float* col = st + v * kVecWidth;
    vf sum = vf{};
    for (int j = 0; j < kn; ++j) {
      const vf p = exp_approx(vload(col + j * kRows) * scale - m);
      vstore(col + j * kRows, p);
      sum += p;
    }
    return sum;
  }
};

// One kv block [k0, k0 + kn) of raw scores st (logit = scale * st, scale > 0, so the row max of
// st gives the row max of the logits): masks positions outside each row's range (when
// mask_positions), updates m (when the block's max exceeds it by more than rescale_threshold)
// and l, lets `probabilities` turn the scores into p = exp(logit - m) and records alpha, the
// factor exp(m_old - m_new) for the output rows (exactly 1 where m did not move or the row had
// seen nothing). Returns whether any alpha differs from 1.
template <int kRows, class Probabilities>
EJK_HD bool softmax_block(SoftmaxState<kRows>& state, float* st, int kn, i64 k0,
                          bool mask_positions, const RowRanges<kRows>& ranges, float scale,
                          float rescale_threshold, const Probabilities& probabilities) {
  const vf neg_inf = splat<vf>(neg_inf_f32());
  const vf scale_v = splat<vf>(scale);
  const vf one = splat<vf>(1.0f);
  vf moved = vf{};
  for (int v = 0; v < SoftmaxState<kRows>::kVecs; ++v) {
    float* col = st + v * kVecWidth;
    vf block_max = neg_inf;
    if (mask_positions) {
      const vi lo = vload_i32(ranges.lo + v * kVecWidth), hi = vload_i32(ranges.hi + v * kVecWidth);
      for (int j = 0; j < kn; ++j) {
        const vi key = vi{} + (i32)(k0 + j);
        vf s = vload(col + j * kRows);
        s = ((key >= lo) & (key <= hi)) ? s : neg_inf;
        vstore(col + j * kRows, s);
        block_max = vmax(block_max, s);
      }
    } else {
      for (int j = 0; j < kn; ++j) block_max = vmax(block_max, vload(col + j * kRows));
    }
    const vf m_old = state.m[v], logit_max = block_max * scale_v;
    const vf m_new = logit_max > m_old + rescale_threshold ? logit_max : m_old;
    // Rows that have seen nothing keep m = -inf; subtracting 0 instead avoids -inf - -inf.
    const vf m_use = m_new == neg_inf ? vf{} : m_new;
    // Nothing accumulated yet (m_old = -inf): any factor is right, 1 spares a rescale.
    const vf alpha = ((m_new == m_old) | (m_old == neg_inf)) ? one : exp_approx(m_old - m_use);
    const vf sum = probabilities(v, kn, scale_v, m_use);
    state.l[v] = state.l[v] * alpha + sum;
    state.m[v] = m_new;
    state.seen[v] = vmax(state.seen[v], logit_max);
    vstore(state.alpha + v * kVecWidth, alpha);
    moved += alpha != one ? one : vf{};
  }
  return reduce_max(moved) > 0.0f;
}

}  // namespace ejk::cpu
