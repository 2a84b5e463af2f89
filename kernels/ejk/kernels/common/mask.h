// Attention mask and logit semantics, defined once.
// Every backend kernel and the float64 reference call these functions; nothing else decides
// which (query, key) pairs are visible or how a logit is transformed.
//
// Positions are relative to the start of the sequence (varlen: of each packed sequence), and
// causal masking is top-left aligned as in ejkernel's seed: key k is visible from query q only
// if k <= q, also when Sq != Sk.
//
// Logit of a visible pair, in this order (the seed's order):
//   s = scale * dot(q, k)
//   s = s + bias[b, h, q, k]                 (bias variants)
//   s = cap * tanh(s / cap)                  (softcap variants)
// Softmax over the visible keys of a row plus the row's sinks (softmax_aux[h, :]), which join
// the denominator but carry no value. With m the row max over logits and sinks:
//   l   = sum_k exp(s_k - m) + sum_i exp(sink_i - m)
//   out = sum_k exp(s_k - m) * v_k / l        (normalize_output = false: without "/ l")
//   lse = m + log(l)
// A row with no visible key and no sink has out = 0 and lse = -inf (never NaN).
//
// A pair is visible when every term present allows it: position (causal, window), segment ids
// and the dense mask (a byte per (batch, head, query, key), nonzero = visible).
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct MaskSpec {
  bool causal = false;
  // Key k is visible from query q iff q - left <= k <= q + right. kUnbounded: no limit.
  i64 window_left = kUnbounded;
  i64 window_right = kUnbounded;
};

// First key a query may see (inclusive, before clamping to 0).
EJK_HD i64 first_visible_key(i64 q, const MaskSpec& m) { return q - m.window_left; }

// Last key a query may see (inclusive, before clamping to Sk - 1).
EJK_HD i64 last_visible_key(i64 q, const MaskSpec& m) {
  i64 hi = q + m.window_right;
  return m.causal ? min_of(hi, q) : hi;
}

EJK_HD bool position_visible(i64 q, i64 k, const MaskSpec& m) {
  return k >= first_visible_key(q, m) && k <= last_visible_key(q, m);
}

// Segment ids: -1 marks padding, which neither attends nor is attended to.
EJK_HD bool segment_visible(i32 q_segment, i32 kv_segment) {
  return q_segment == kv_segment && q_segment >= 0;
}

using u8 = unsigned char;

// Dense attention mask: row q of (batch b, head h) holds a byte per key; nonzero is visible.
EJK_HD bool dense_mask_visible(const u8* row, i64 k) { return row[k] != 0; }

// The logit transform after scaling, with the backend's tanh (each has its own fast one).
template <bool kBias, bool kSoftcap, class Tanh>
EJK_HD float transform_logit(float scaled, float bias, float cap, float inv_cap, Tanh tanh_fn) {
  float s = scaled;
  if (kBias) s += bias;
  if (kSoftcap) s = cap * tanh_fn(s * inv_cap);
  return s;
}

}  // namespace ejk
