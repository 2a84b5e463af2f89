// The attention variant, once for every backend: the compile-time features a flash kernel is
// built with (the key's flags), the mask they imply, and the tile classifier every kernel and
// the float64 reference use to decide which key blocks a query block visits and which of them
// need a per-element mask. The backward adapter swaps the roles (a key block's queries).
//
// Masks beyond causal + window (paged, block-sparse, sliding over pages) are meant to arrive as
// small hook structs with the same three questions as MaskSpec answers through mask.h: the
// first and last visible key of a query (and the swapped pair), and whether a pair is visible;
// the classifier below is written against those questions only.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/mask.h"

namespace ejk {

// Compile-time features of a variant (a structural type, usable as a template argument).
struct AttentionFlags {
  bool causal = false;
  bool window = false;    // sliding window bounds from the params' MaskSpec
  bool segments = false;  // q/kv segment ids; without it a kernel has no segment code
  bool softcap = false;   // cap * tanh(s / cap)
  bool sinks = false;     // softmax_aux joins the denominator
  bool bias = false;      // additive bias in the element type
  // sm90a's schedule (one CTA per work item, the key's `.items`): changes the order of work,
  // never the result; the other backends' keys leave it off.
  bool per_item = false;
  // Dropout on the attention weights (common/philox.h); last, so that keys without it keep the
  // mangled names and binaries they had before it existed.
  bool dropout = false;
  // A dense mask of bytes (FlashFwdParams::dense_mask), ANDed with the rest; last for the same
  // reason as dropout.
  bool dense_mask = false;
};

// Whether a variant's mask can hide keys by position at all (else every key is visible).
EJK_HD constexpr bool bounded_mask(AttentionFlags f) { return f.causal || f.window; }

// The variant's mask: the causal bit comes from the variant, window bounds only when the variant
// has the window axis (otherwise unbounded, whatever `given` holds).
template <AttentionFlags F> EJK_HD MaskSpec variant_mask(const MaskSpec& given) {
  MaskSpec m;
  m.causal = F.causal;
  if constexpr (F.window) {
    m.window_left = given.window_left;
    m.window_right = given.window_right;
  }
  return m;
}

// The same for a caller that knows the variant only at run time (the reference).
inline MaskSpec variant_mask(bool causal, bool window, const MaskSpec& given) {
  MaskSpec m;
  m.causal = causal;
  if (window) {
    m.window_left = given.window_left;
    m.window_right = given.window_right;
  }
  return m;
}

// An inclusive range of positions; empty when first > last.
struct PositionSpan {
  i64 first, last;
  EJK_HD bool empty() const { return first > last; }
};

// Keys [0, len_k) that some query of [q_first, q_last] sees by position (mask.h's bounds are
// monotone in q, so the union is one interval). kBounded false: every key (no arithmetic).
template <bool kBounded = true>
EJK_HD PositionSpan block_visible_keys(const MaskSpec& m, i64 q_first, i64 q_last, i64 len_k) {
  if (!kBounded) return {0, len_k - 1};
  return {max_of<i64>(first_visible_key(q_first, m), 0),
          min_of<i64>(last_visible_key(q_last, m), len_k - 1)};
}

// Half-open range of key tiles of block_k keys that a query block visits; empty when no key
// is visible.
struct TileRange {
  int begin, end;
  EJK_HD int count() const { return end - begin; }
};

template <bool kBounded = true>
EJK_HD TileRange visible_key_tiles(const MaskSpec& m, i64 q_first, i64 q_last, i64 len_k,
                                   int block_k) {
  i64 lo = 0, hi = len_k;  // half-open keys [lo, hi)
  if (kBounded) {
    lo = max_of<i64>(lo, first_visible_key(q_first, m));
    hi = min_of<i64>(hi, last_visible_key(q_last, m) + 1);
  }
  const int begin = int(lo / block_k);
  return {begin, hi > lo ? int(ceil_div<i64>(hi, block_k)) : begin};
}

// Whether every (query, key) pair of queries [q_first, q_last] and keys [k_first, k_last] is
// visible by position (the tile then needs no per-element position mask). The caller checks
// the sequence end (k_last < len_k) itself: kernels differ in how they treat padding keys.
template <bool kBounded = true>
EJK_HD bool tile_fully_visible(const MaskSpec& m, i64 q_first, i64 q_last, i64 k_first,
                               i64 k_last) {
  if (!kBounded) return true;
  return k_first >= first_visible_key(q_last, m) && k_last <= last_visible_key(q_first, m);
}

// Whether no pair of the tile is visible by position.
EJK_HD bool tile_fully_masked(const MaskSpec& m, i64 q_first, i64 q_last, i64 k_first,
                              i64 k_last) {
  return k_last < first_visible_key(q_first, m) || k_first > last_visible_key(q_last, m);
}

enum class TileClass { masked, partial, visible };

// A tile of queries [q_first, q_last] and keys [k_first, k_last] of a sequence of len_k keys:
// nothing visible, some pairs (a per-element mask), or every pair visible and inside the sequence.
EJK_HD TileClass classify_tile(const MaskSpec& m, i64 q_first, i64 q_last, i64 k_first,
                               i64 k_last, i64 len_k) {
  // Keys past the sequence end count as masked: only those before it can make a pair visible.
  if (k_first >= len_k || tile_fully_masked(m, q_first, q_last, k_first, min_of(k_last, len_k - 1)))
    return TileClass::masked;
  if (k_last < len_k && tile_fully_visible(m, q_first, q_last, k_first, k_last))
    return TileClass::visible;
  return TileClass::partial;
}

// Backward adapter (key blocks outer, q blocks inner): the roles swapped. Query q sees key k iff
// first_visible_key(q) <= k <= last_visible_key(q); solved for q, with mask.h's bounds
// (q - left <= k <= min(q + right, causal ? q : q + right)).
EJK_HD i64 first_visible_query(i64 k, const MaskSpec& m) {
  const i64 lo = k - m.window_right;
  return m.causal ? max_of(lo, k) : lo;
}
EJK_HD i64 last_visible_query(i64 k, const MaskSpec& m) { return k + m.window_left; }

// Queries [0, len_q) that some key of [k_first, k_last] is seen by.
template <bool kBounded = true>
EJK_HD PositionSpan block_visible_queries(const MaskSpec& m, i64 k_first, i64 k_last, i64 len_q) {
  if (!kBounded) return {0, len_q - 1};
  return {max_of<i64>(first_visible_query(k_first, m), 0),
          min_of<i64>(last_visible_query(k_last, m), len_q - 1)};
}

// The q tiles of block_q queries a key block visits.
template <bool kBounded = true>
EJK_HD TileRange visible_query_tiles(const MaskSpec& m, i64 k_first, i64 k_last, i64 len_q,
                                     int block_q) {
  const PositionSpan qs = block_visible_queries<kBounded>(m, k_first, k_last, len_q);
  const int begin = int(qs.first / block_q);
  return {begin, qs.last >= qs.first ? int(ceil_div<i64>(qs.last + 1, block_q)) : begin};
}

// A tile seen from its key block: the same classes (visibility of a pair does not depend on
// which side iterates), with the sequence end on the query side.
EJK_HD TileClass classify_tile_for_keys(const MaskSpec& m, i64 k_first, i64 k_last, i64 q_first,
                                        i64 q_last, i64 len_q) {
  if (q_first >= len_q || tile_fully_masked(m, q_first, min_of(q_last, len_q - 1), k_first, k_last))
    return TileClass::masked;
  if (q_last < len_q && tile_fully_visible(m, q_first, q_last, k_first, k_last))
    return TileClass::visible;
  return TileClass::partial;
}

}  // namespace ejk
