// One (query tile, key tile) step of the CPU flash attention backward (the math:
// common/flash_bwd_params.h), shared by its dk/dv and dq tasks: the operands packed to f32, the
// two products S = Q (scale K)^T and dP = dO V^T (block_q x block_k, keys along the vector
// lanes), and the elementwise pass that turns them into P (the dropped weight under dropout) and
// dX, the gradient of the pre-cap logit, with every mask applied. The tasks then run the
// products that consume them (dV += P^T dO, dK += dX^T Q, dQ += dX K) on the same FMA tiles.
// bf16 variants on AMX targets run all five products on tiles instead (flash_bwd_amx.h) and
// share the rest.
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/common/philox.h"
#include "ejk/kernels/cpu/amx.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/task.h"
#include "ejk/kernels/cpu/tiles.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

template <ElemKind kElem, int kHeadDim, int kBlockQ, int kBlockK, AttentionFlags kFlags>
struct FlashBwdConfig {
  static constexpr ElemKind elem = kElem;
  static constexpr int head_dim = kHeadDim, block_q = kBlockQ, block_k = kBlockK;
  static constexpr AttentionFlags flags = kFlags;
  // Rows of the packed operands and gradient accumulators, padded to whole vectors.
  static constexpr int padded_dim = (kHeadDim + kVecWidth - 1) / kVecWidth * kVecWidth;
};

namespace bwd {

// Whether a variant's products run on AMX tiles (flash_bwd_amx.h: compiled for AMX, bf16,
// head_dim and blocks multiples of 32); the others run on vector FMAs.
template <class Cfg> constexpr bool bwd_uses_amx() {
#if EJK_CPU_AMX
  return Cfg::elem == ElemKind::bf16 && Cfg::head_dim % 32 == 0 && Cfg::block_q % 32 == 0 && Cfg::block_k % 32 == 0;
#else
  return false;
#endif
}

// Sequence b's rows: its first query and key row on the sequence axes (dense: 0, with the
// batch stride; varlen: from cu_seqlens) and its lengths.
struct Seq {
  i64 b, q_row0, k_row0, sq, sk;
  bool varlen;
};
EJK_HD Seq seq_of(const FlashFwdParams& f, i64 b) {
  if (f.cu_seqlens_q) {
    const TokenSpan tq = token_span(f.cu_seqlens_q, 0, f.total_q, b), tk = token_span(f.cu_seqlens_k, 0, f.total_k, b);
    return {b, tq.begin, tk.begin, tq.end - tq.begin, tk.end - tk.begin, true};
  }
  return {b, 0, 0, f.seqlen_q, f.seqlen_k, false};
}
// Element offset of row `row` (sequence position) of head h in a [B, S, H, D] tensor.
EJK_HD i64 at(const Seq& s, i64 row0, i64 row, i64 h, i64 sb, i64 ss, i64 sh) {
  return (s.varlen ? 0 : s.b * sb) + (row0 + row) * ss + h * sh;
}
// Offset of query i's entry of head h in lse's layout (d_lse shares it).
EJK_HD i64 lse_at(const FlashFwdParams& f, const Seq& s, i64 h, i64 i) {
  return (s.varlen ? 0 : s.b * f.lse_stride_b) + h * f.lse_stride_h + s.q_row0 + i;
}

// rows x D gradient rows of f32 (stride Dp) times `factor` into a [B, S, H, D] tensor.
template <ElemKind K, int D, int Dp>
EJK_HD void store_rows(void* base, i64 at0, i64 row_stride, int rows, const float* src, float factor) {
  for (int r = 0; r < rows; ++r) {
    Elem<K>* dst = static_cast<Elem<K>*>(base) + at0 + r * row_stride;
    const float* x = src + r * Dp;
    int d = 0;
    for (; d + kVecWidth <= D; d += kVecWidth) store_from_f32<K>(dst + d, vload(x + d) * factor);
    for (; d < D; ++d) dst[d] = from_f32<K>(x[d] * factor);
  }
}

// A block of query rows of one head: Q and dO as f32 rows (zero past the block and past D),
// lse, D_i = dO_i . out_i - dlse_i and the segment ids. Rows whose lse is -inf saw nothing and
// have no gradient (dead).
template <class Cfg> struct QueryTile {
  static constexpr int BQ = Cfg::block_q, Dp = Cfg::padded_dim;
  static constexpr int kRows = bwd_uses_amx<Cfg>() ? 0 : BQ;  // AMX: bf16 rows in AmxQueryTile
  alignas(64) float q[kRows * Dp + 1];
  alignas(64) float d_out[kRows * Dp + 1];
  float lse[BQ], delta[BQ];
  i32 segment[BQ];
  i64 first;  // sequence position of row 0
  int rows;   // rows in the sequence
};

// Loads queries [first, first + rows) of head h; false when every row is dead (the tile's
// products would all be zero, so the caller skips it).
template <class Cfg>
EJK_HD bool load_query_tile(const FlashBwdParams& p, const Seq& s, i64 h, i64 first, int rows, QueryTile<Cfg>& t) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int BQ = Cfg::block_q, D = Cfg::head_dim, Dp = Cfg::padded_dim;
  const FlashFwdParams& f = p.fwd;
  bool any = false;
  for (int i = 0; i < rows; ++i) {
    t.lse[i] = f.lse[lse_at(f, s, h, first + i)];
    any |= t.lse[i] != neg_inf_f32();
  }
  if (!any) return false;
  for (int i = rows; i < BQ; ++i) t.lse[i] = neg_inf_f32();
  t.first = first, t.rows = rows;
  using T = Elem<E>;
  const i64 q_at = at(s, s.q_row0, first, h, f.q_stride_b, f.q_stride_s, f.q_stride_h);
  const i64 do_at = at(s, s.q_row0, first, h, p.do_stride_b, p.do_stride_s, p.do_stride_h);
  if constexpr (!bwd_uses_amx<Cfg>()) {
    pack_rows<E>(static_cast<const T*>(f.q) + q_at, f.q_stride_s, rows, BQ, D, t.q, Dp);
    pack_rows<E>(static_cast<const T*>(p.d_out) + do_at, p.do_stride_s, rows, BQ, D, t.d_out, Dp);
  }
  float out_row[D], d_out_row[D];
  const T* out = static_cast<const T*>(f.out) + at(s, s.q_row0, first, h, f.o_stride_b, f.o_stride_s, f.o_stride_h);
  for (int i = 0; i < rows; ++i) {
    if (t.lse[i] == neg_inf_f32()) continue;
    const float* d_out = d_out_row;
    if constexpr (bwd_uses_amx<Cfg>()) convert_row<E>(static_cast<const T*>(p.d_out) + do_at + i * p.do_stride_s, d_out_row, D);
    else d_out = t.d_out + i * Dp;
    convert_row<E>(out + i * f.o_stride_s, out_row, D);
    t.delta[i] = row_dot<D>(d_out, out_row) - (p.d_lse ? p.d_lse[lse_at(f, s, h, first + i)] : 0.0f);
  }
  if constexpr (Cfg::flags.segments)
    for (int i = 0; i < rows; ++i) t.segment[i] = f.q_segment_ids[s.b * f.q_seg_stride_b + first + i];
  return true;
}

// ---- transposed packing ----

template <int... L> struct Lanes {};
template <int W> struct LaneSeq;
template <> struct LaneSeq<16> { using type = Lanes<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15>; };
template <> struct LaneSeq<8> { using type = Lanes<0, 1, 2, 3, 4, 5, 6, 7>; };
template <> struct LaneSeq<4> { using type = Lanes<0, 1, 2, 3>; };

// One butterfly stage of a kVecWidth-square transpose: swaps the off-diagonal S x S blocks of
// every 2S x 2S block of rows (a = row i, b = row i + S).
template <int S, int... L> EJK_HD vf swap_low(vf a, vf b, Lanes<L...>) {
  return __builtin_shufflevector(a, b, ((L & S) ? kVecWidth + L - S : L)...);
}
template <int S, int... L> EJK_HD vf swap_high(vf a, vf b, Lanes<L...>) {
  return __builtin_shufflevector(a, b, ((L & S) ? kVecWidth + L : L + S)...);
}
template <int S> EJK_HD void transpose_stage(vf* r) {
#pragma GCC unroll 16
  for (int i = 0; i < kVecWidth; ++i) {
    if (i & S) continue;
    const vf lo = swap_low<S>(r[i], r[i + S], typename LaneSeq<kVecWidth>::type{});
    const vf hi = swap_high<S>(r[i], r[i + S], typename LaneSeq<kVecWidth>::type{});
    r[i] = lo;
    r[i + S] = hi;
  }
}
// r[i][j] <- r[j][i] for a kVecWidth-square block.
EJK_HD void transpose_block(vf* r) {
  if constexpr (kVecWidth >= 16) transpose_stage<8>(r);
  if constexpr (kVecWidth >= 8) transpose_stage<4>(r);
  transpose_stage<2>(r);
  transpose_stage<1>(r);
}

// dst[d][j] = scale * src[j][d] (kCols columns, D rows) for j < rows, 0 for j in [rows, kCols):
// square blocks of vectors through transpose_block, a scalar loop for the last D % kVecWidth rows.
// The score products read K and V this way once per key tile, so a plain element loop would
// cost a third of a dq task.
template <ElemKind K, int kCols, int D>
EJK_HD void pack_transposed(const Elem<K>* src, i64 src_stride, int rows, float scale, float* dst) {
  constexpr int W = kVecWidth, kWhole = D / W * W;
  for (int j0 = 0; j0 < kCols; j0 += W) {
    for (int d0 = 0; d0 < kWhole; d0 += W) {
      vf r[W];
#pragma GCC unroll 16
      for (int t = 0; t < W; ++t) r[t] = j0 + t < rows ? load_f32<K>(src + (j0 + t) * src_stride + d0) * scale : vf{};
      transpose_block(r);
#pragma GCC unroll 16
      for (int t = 0; t < W; ++t) vstore(dst + (d0 + t) * kCols + j0, r[t]);
    }
    for (int d = kWhole; d < D; ++d)
      for (int t = 0; t < W; ++t)
        dst[d * kCols + j0 + t] = j0 + t < rows ? scale * to_f32<K>(src[(j0 + t) * src_stride + d]) : 0.0f;
  }
}

// A block of keys of one kv head: (scale K)^T and V^T (head_dim x block_k, zero columns past
// the block) for the score products, and the keys' segment ids (-1 past the block).
template <class Cfg> struct KeyTile {
  static constexpr int BK = Cfg::block_k, D = bwd_uses_amx<Cfg>() ? 1 : Cfg::head_dim;
  static_assert(BK % kVecWidth == 0, "block_k must be a multiple of the vector width (16 with AVX-512, 8 with AVX2, 4)");
  alignas(64) float kt[D * BK];
  alignas(64) float vt[D * BK];
  i32 segment[BK];
  i64 first;
  int keys;
};

template <class Cfg>
EJK_HD void load_key_tile(const FlashBwdParams& p, const Seq& s, i64 hk, i64 first, int keys, KeyTile<Cfg>& t) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int BK = Cfg::block_k, D = Cfg::head_dim;
  const FlashFwdParams& f = p.fwd;
  using T = Elem<E>;
  t.first = first, t.keys = keys;
  const T* k = static_cast<const T*>(f.k) + at(s, s.k_row0, first, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h);
  const T* v = static_cast<const T*>(f.v) + at(s, s.k_row0, first, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h);
  if constexpr (!bwd_uses_amx<Cfg>()) {  // the AMX products take bf16 pairs instead (AmxKeyTile)
    pack_transposed<E, BK, D>(k, f.k_stride_s, keys, f.scale, t.kt);
    pack_transposed<E, BK, D>(v, f.v_stride_s, keys, 1.0f, t.vt);
  }
  if constexpr (Cfg::flags.segments)
    for (int j = 0; j < BK; ++j) t.segment[j] = j < keys ? f.kv_segment_ids[s.b * f.kv_seg_stride_b + first + j] : -1;
}

// C (+)= A B on the FMA tiles (tiles.h), out of line: the tasks run each shape from several
// places, and one copy per shape halves the JIT's compile; a call per tile product costs
// nothing. Templated on the variant's Cfg so that each variant's object keeps its own copy
// (objects of several ISAs share one library). row_scale null: C starts at zero.
template <class Cfg, int kRows, int kCols>
__attribute__((noinline)) void fma_product(BroadcastOperand a, const float* b, i64 ldb, int depth, float* c, i64 ldc,
                                           const float* row_scale) {
  NoPrefetch none;
  fma_gemm<kRows, kCols>(a, b, ldb, depth, c, ldc, row_scale != nullptr, row_scale, none);
}

// The two score products of a tile: S = Q (scale K)^T and dP = dO V^T, both [block_q][block_k].
template <class Cfg>
EJK_HD void score_products(const QueryTile<Cfg>& q, const KeyTile<Cfg>& k, float* s, float* dp) {
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim, Dp = Cfg::padded_dim;
  fma_product<Cfg, BQ, BK / kVecWidth>({q.q, Dp, 1}, k.kt, BK, D, s, BK, nullptr);
  fma_product<Cfg, BQ, BK / kVecWidth>({q.d_out, Dp, 1}, k.vt, BK, D, dp, BK, nullptr);
}

// ---- which tiles to skip ----

// Whether the tile can hold a visible pair by its segment ids: the id ranges of its rows and keys
// overlap at a non-negative id (packed sequences keep ids sorted, so disjoint blocks are common).
template <class Cfg> EJK_HD bool segments_may_meet(const QueryTile<Cfg>& q, const KeyTile<Cfg>& k) {
  if constexpr (Cfg::flags.segments) {
    i32 q_lo = q.segment[0], q_hi = q.segment[0], k_lo = k.segment[0], k_hi = k.segment[0];
    for (int i = 1; i < q.rows; ++i) q_lo = min_of(q_lo, q.segment[i]), q_hi = max_of(q_hi, q.segment[i]);
    for (int j = 1; j < k.keys; ++j) k_lo = min_of(k_lo, k.segment[j]), k_hi = max_of(k_hi, k.segment[j]);
    return q_hi >= 0 && k_hi >= 0 && q_lo <= k_hi && k_lo <= q_hi;
  }
  return true;
}

// What the dense mask says about rows [q_first, q_first + rows) of head h and keys
// [k_first, k_first + keys): a byte scan, far cheaper than the tile's products.
template <class Cfg>
EJK_HD DenseMaskTile classify_dense_tile(const FlashFwdParams& f, const Seq& s, i64 h, i64 q_first, int rows,
                                         i64 k_first, int keys) {
  if constexpr (Cfg::flags.dense_mask) {
    const u8* row = flash_mask_row(f, s.b, h, q_first) + k_first;
    bool any = false, all = true;
    for (int i = 0; i < rows && !(any && !all); ++i, row += f.mask_stride_q) scan_mask_row(row, keys, any, all);
    return !any ? DenseMaskTile::none_visible : all ? DenseMaskTile::all_visible : DenseMaskTile::per_pair;
  }
  return DenseMaskTile::all_visible;
}

// ---- the elementwise pass ----

// min(n, kVecWidth) elements of a row as f32 lanes (bias) or i32 lanes (mask bytes), lanes past
// n zero: the last key tile of a row may end before a whole vector.
template <ElemKind K> EJK_HD vf load_f32_partial(const Elem<K>* p, int n) {
  if (n >= kVecWidth) return load_f32<K>(p);
  vf v = vf{};
  for (int i = 0; i < n; ++i) v[i] = to_f32<K>(p[i]);
  return v;
}
EJK_HD vi load_mask_bytes(const u8* p, int n) {
  vi v = vi{};
  for (int i = 0; i < kVecWidth && i < n; ++i) v[i] = p[i];
  return v;
}

// The keep factors Z of keys [key0, key0 + kVecWidth) of row (b, h, i), key0 a multiple of 4:
// one Philox block per four keys (common/philox.h).
EJK_HD vf dropout_factors(const DropoutParams& d, i64 b, i64 h, i64 i, i64 key0) {
  vf z;
#pragma GCC unroll 4
  for (int g = 0; g < kVecWidth; g += 4) {
    const Philox4 words = dropout_words(d, b, h, i, key0 + g);
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) z[g + l] = dropout_keep_word(d, words.w[l]) ? d.scale : 0.0f;
  }
  return z;
}

// Per-row masks of one tile: position bounds and whether dense mask bytes are read per pair.
struct TileMasks {
  MaskSpec mask;
  bool dense_pairs;
};

// In place: s (score_scale times the raw logits: Q (scale K)^T with 1, Q K^T with the scale)
// becomes P (dropout variants: P Z, the weight the
// output was made of) and dp (dO V^T) becomes dX, for every row of the block; pairs that are
// hidden, past the block, or in dead rows get 0 in both. Keys run along the vector lanes, so
// mask.h's rules appear in their vector form: positions from first/last_visible_key, segments
// (segment_visible) as a row id >= 0 equal to the key's, dense mask bytes nonzero
// (dense_mask_visible), and transform_logit's order, bias then cap * tanh(x / cap).
template <class Cfg>
EJK_HD void tile_gradients(const FlashBwdParams& p, const Seq& s, i64 h, const QueryTile<Cfg>& q,
                           const KeyTile<Cfg>& k, const TileMasks& tm, float score_scale, float* sp, float* dp) {
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k;
  constexpr AttentionFlags F = Cfg::flags;
  using T = Elem<Cfg::elem>;
  const FlashFwdParams& f = p.fwd;
  const float inv_cap = F.softcap ? 1.0f / f.softcap : 0.0f;
  const vi lanes = lane_index();
  for (int i = 0; i < BQ; ++i) {
    float* srow = sp + i * BK;
    float* dprow = dp + i * BK;
    // Dead, past the block, or padding (segment -1 sees nothing).
    if (q.lse[i] == neg_inf_f32() || (F.segments && q.segment[i] < 0)) {
      for (int j = 0; j < BK; j += kVecWidth) vstore(srow + j, vf{}), vstore(dprow + j, vf{});
      continue;
    }
    const i64 qi = q.first + i;
    // Visible keys of the row by position, relative to the tile, clamped to [-1, keys - 1].
    i64 lo = 0, hi = k.keys - 1;
    if constexpr (bounded_mask(F)) {
      lo = max_of<i64>(first_visible_key(qi, tm.mask) - k.first, 0);
      hi = max_of<i64>(min_of<i64>(last_visible_key(qi, tm.mask) - k.first, hi), -1);
    }
    const vi lo_v = vi{} + i32(lo), hi_v = vi{} + i32(hi);
    const vf lse = splat<vf>(q.lse[i]), delta = splat<vf>(q.delta[i]);
    const T* bias = nullptr;
    if constexpr (F.bias)
      bias = static_cast<const T*>(f.bias) + s.b * f.bias_stride_b + h * f.bias_stride_h + qi * f.bias_stride_q + k.first;
    const u8* mask_row = F.dense_mask ? flash_mask_row(f, s.b, h, qi) + k.first : nullptr;
    for (int j = 0; j < BK; j += kVecWidth) {
      const vi key = lanes + j;
      vi visible = (key >= lo_v) & (key <= hi_v);
      if constexpr (F.segments) {
        vi kseg;
        __builtin_memcpy(&kseg, k.segment + j, sizeof kseg);
        visible &= kseg == q.segment[i];
      }
      if constexpr (F.dense_mask)
        if (tm.dense_pairs) visible &= load_mask_bytes(mask_row + j, k.keys - j) != 0;
      vf x = vload(srow + j) * score_scale;
      if constexpr (F.bias) x += load_f32_partial<Cfg::elem>(bias + j, k.keys - j);
      vf jacobian = splat<vf>(1.0f);
      if constexpr (F.softcap) {
        const vf t = tanh_approx(x * inv_cap);
        x = f.softcap * t;
        jacobian = 1.0f - t * t;  // d(cap tanh(x / cap)) / dx
      }
      const vf e = x - lse;
      vf prob = exp_approx(e > 0.0f ? vf{} : e);  // prob_exponent: never above 0, NaN stays
      prob = visible != 0 ? prob : vf{};
      const vf dpv = vload(dprow + j);
      vf ds;
      if constexpr (F.dropout) {
        const vf z = dropout_factors(flash_dropout(p), s.b, h, qi, k.first + j);
        ds = prob * (z * dpv - delta);
        prob *= z;
      } else {
        ds = prob * (dpv - delta);
      }
      if constexpr (F.softcap) ds *= jacobian;
      vstore(srow + j, prob);
      vstore(dprow + j, visible != 0 ? ds : vf{});
    }
  }
}

}  // namespace bwd
}  // namespace ejk::cpu
