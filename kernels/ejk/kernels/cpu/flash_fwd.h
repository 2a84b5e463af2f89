// CPU flash attention forward: one task = (sequence b, q head h, block of kBlockQ queries).
// Semantics are mask.h's; the runtime runs disjoint task ranges on its thread pool, so
// everything here is reentrant and lives on the calling thread's stack.
//
// Per task: Q^T (scaled, float32) is packed once; then for every kv block that some query of
// the block can see, K and V rows are packed to float32 and
//     S^T[key][query] = K . Q^T            (fma_gemm, queries along vector lanes)
//     logit transform, masks, online softmax (softmax.h, lane-wise)
//     O[query][d] = alpha * O + P . V      (fma_gemm, alpha folded into the tile load)
// and finally O is normalized, sinks are folded in, and out/lse are written.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/softmax.h"
#include "ejk/kernels/cpu/tiles.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Compile-time features of a variant (a structural type, usable as a template argument).
struct FlashFlags {
  bool causal = false;
  bool window = false;   // sliding window bounds from FlashFwdParams::mask
  bool softcap = false;  // cap * tanh(s / cap) with FlashFwdParams::softcap
  bool sinks = false;    // softmax_aux joins the denominator
  bool bias = false;     // additive bias in the element type
};

// Stack budget of one task's workspace (worker threads have 8 MiB stacks).
inline constexpr long kMaxWorkspaceBytes = 512 * 1024;

template <ElemKind kElem, int kHeadDim, int kBlockQ, int kBlockK, FlashFlags kFlags>
struct FlashFwdConfig {
  static constexpr ElemKind elem = kElem;
  static constexpr int head_dim = kHeadDim;
  static constexpr int block_q = kBlockQ;
  static constexpr int block_k = kBlockK;
  static constexpr FlashFlags flags = kFlags;
  // Rows of the V block and of the output accumulator are padded to whole vectors.
  static constexpr int head_dim_padded = (kHeadDim + kVecWidth - 1) / kVecWidth * kVecWidth;
  static constexpr int q_vecs = kBlockQ / kVecWidth;

  static_assert(kHeadDim > 0 && kBlockQ > 0 && kBlockK > 0, "sizes must be positive");
  static_assert(kBlockQ % kVecWidth == 0,
                "block_q must be a multiple of the vector width (16 with AVX-512, 8 with AVX2, 4)");
};

// Everything a task works on, on its thread's stack.
template <class Cfg> struct Workspace {
  static constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim,
                       Dp = Cfg::head_dim_padded;
  alignas(64) float qt[D * BQ];  // Q^T * scale                          (D, BQ)
  alignas(64) float kb[BK * D];  // K block, zero rows past its end      (BK, D)
  alignas(64) float vb[BK * Dp]; // V block                              (BK, Dp)
  alignas(64) float st[BK * BQ]; // scores, then probabilities, transposed (BK, BQ)
  alignas(64) float o[BQ * Dp];  // output accumulator                   (BQ, Dp)
  SoftmaxState<BQ> softmax;
  RowRanges<BQ> ranges;
  i32 q_seg[BQ], kv_seg[BK];
};

// Where one task's data lives. Offsets are in elements and already include the head.
struct TaskGeometry {
  i64 b, h;
  i64 q0;    // first query of the block, relative to the sequence start
  int rows;  // queries in the block (the last block of a sequence may be short)
  i64 seqlen_k;
  i64 q_off, k_off, v_off, o_off, lse_off, bias_off;
};

// Task t -> (b, h, q block) as flash_fwd_num_tasks counts them; false for an empty task
// (a block past the end of a shorter varlen sequence).
EJK_HD bool decode_task(const FlashFwdParams& p, i64 t, int block_q, TaskGeometry& g) {
  const i64 nqb = ceil_div(p.seqlen_q, (i64)block_q);
  const i64 qb = t % nqb;
  g.h = (t / nqb) % p.heads_q;
  g.b = t / (nqb * p.heads_q);
  const i64 hk = g.h / (p.heads_q / p.heads_kv);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const i64 q_row0 = varlen ? p.cu_seqlens_q[g.b] : 0;
  const i64 k_row0 = varlen ? p.cu_seqlens_k[g.b] : 0;
  const i64 seqlen_q = varlen ? p.cu_seqlens_q[g.b + 1] - q_row0 : p.seqlen_q;
  g.seqlen_k = varlen ? p.cu_seqlens_k[g.b + 1] - k_row0 : p.seqlen_k;
  g.q0 = qb * block_q;
  if (g.q0 >= seqlen_q) return false;
  g.rows = (int)min_of((i64)block_q, seqlen_q - g.q0);
  // Varlen rows are packed: the sequence is found by its row, not by a batch stride.
  const i64 qb_off = varlen ? 0 : g.b * p.q_stride_b;
  const i64 ob_off = varlen ? 0 : g.b * p.o_stride_b;
  g.q_off = qb_off + (q_row0 + g.q0) * p.q_stride_s + g.h * p.q_stride_h;
  g.o_off = ob_off + (q_row0 + g.q0) * p.o_stride_s + g.h * p.o_stride_h;
  g.k_off = (varlen ? 0 : g.b * p.k_stride_b) + k_row0 * p.k_stride_s + hk * p.k_stride_h;
  g.v_off = (varlen ? 0 : g.b * p.v_stride_b) + k_row0 * p.v_stride_s + hk * p.v_stride_h;
  g.lse_off = (varlen ? 0 : g.b * p.lse_stride_b) + g.h * p.lse_stride_h + q_row0 + g.q0;
  g.bias_off = g.b * p.bias_stride_b + g.h * p.bias_stride_h + g.q0 * p.bias_stride_q;
  return true;
}

// The variant's mask: the causal bit comes from the flags, window bounds only with the flag.
template <class Cfg> EJK_HD MaskSpec variant_mask(const FlashFwdParams& p) {
  MaskSpec m;
  m.causal = Cfg::flags.causal;
  if constexpr (Cfg::flags.window) {
    m.window_left = p.mask.window_left;
    m.window_right = p.mask.window_right;
  }
  return m;
}

// All n ids equal? Then one segment_visible call decides for the whole block.
EJK_HD bool uniform_ids(const i32* ids, int n) {
  for (int i = 1; i < n; ++i)
    if (ids[i] != ids[0]) return false;
  return true;
}

// Segment handling of one kv block.
enum class SegmentMask { none, per_pair, skip_block };

template <class Cfg>
EJK_HD SegmentMask classify_segments(const FlashFwdParams& p, const TaskGeometry& g,
                                     Workspace<Cfg>& ws, i64 k0, int kn, bool q_uniform) {
  if (!p.q_segment_ids) return SegmentMask::none;
  const i32* kv = p.kv_segment_ids + g.b * p.kv_seg_stride_b + k0;
  for (int j = 0; j < kn; ++j) ws.kv_seg[j] = kv[j];
  if (!q_uniform || !uniform_ids(ws.kv_seg, kn)) return SegmentMask::per_pair;
  return segment_visible(ws.q_seg[0], ws.kv_seg[0]) ? SegmentMask::none : SegmentMask::skip_block;
}

// Prefetches the K and V rows of the kv block [k0, k0 + kn) during the current block's work.
template <class Cfg>
EJK_HD BlockPrefetcher prefetch_block(const FlashFwdParams& p, const TaskGeometry& g, i64 k0,
                                      int kn) {
  using E = Elem<Cfg::elem>;
  constexpr int kRowBytes = Cfg::head_dim * (int)sizeof(E);
  constexpr int kLines = (kRowBytes + RowPrefetcher::kLine - 1) / RowPrefetcher::kLine;
  BlockPrefetcher pf;
  const E* k = static_cast<const E*>(p.k) + g.k_off + k0 * p.k_stride_s;
  const E* v = static_cast<const E*>(p.v) + g.v_off + k0 * p.v_stride_s;
  pf.k = {reinterpret_cast<const char*>(k), p.k_stride_s * (i64)sizeof(E), kLines, kn, 0};
  pf.v = {reinterpret_cast<const char*>(v), p.v_stride_s * (i64)sizeof(E), kLines, kn, 0};
  return pf;
}

// S^T, masks, softmax and P.V for the kv block [k0, k0 + kn); meanwhile the rows of the next
// block (next_kn of them, 0 for none) are prefetched.
template <class Cfg>
EJK_HD void process_kv_block(const FlashFwdParams& p, const TaskGeometry& g, Workspace<Cfg>& ws,
                             i64 k0, int kn, int next_kn, bool segment_pairs) {
  using E = Elem<Cfg::elem>;
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim;
  constexpr int Dp = Cfg::head_dim_padded;
  const E* k = static_cast<const E*>(p.k) + g.k_off + k0 * p.k_stride_s;
  const E* v = static_cast<const E*>(p.v) + g.v_off + k0 * p.v_stride_s;
  pack_rows<Cfg::elem>(k, p.k_stride_s, kn, BK, D, ws.kb, D);
  pack_rows<Cfg::elem>(v, p.v_stride_s, kn, kn, D, ws.vb, Dp);

  BlockPrefetcher next = prefetch_block<Cfg>(p, g, k0 + BK, next_kn);
  fma_gemm<BK, BQ / kVecWidth>({ws.kb, D, 1}, ws.qt, BQ, D, ws.st, BQ, false, nullptr, next);
  if constexpr (Cfg::flags.bias || Cfg::flags.softcap) {
    const E* bias = Cfg::flags.bias ? static_cast<const E*>(p.bias) + g.bias_off + k0 : nullptr;
    transform_logits<Cfg::flags.bias, Cfg::flags.softcap, Cfg::elem, BQ>(
        ws.st, kn, g.rows, bias, p.bias_stride_q, p.softcap);
  }
  if (segment_pairs) mask_segments<BQ>(ws.st, kn, g.rows, ws.q_seg, ws.kv_seg);
  const bool mask_positions = !ws.ranges.fully_visible(k0, k0 + kn - 1);
  softmax_block<BQ>(ws.softmax, ws.st, kn, k0, mask_positions, ws.ranges);

  NoPrefetch none;
  fma_gemm<BQ, Dp / kVecWidth>({ws.st, 1, BQ}, ws.vb, Dp, kn, ws.o, Dp, true, ws.softmax.alpha,
                               none);
}

// Folds the sinks into row i's statistics and writes its output row and lse.
template <class Cfg>
EJK_HD void finalize_row(const FlashFwdParams& p, const TaskGeometry& g, Workspace<Cfg>& ws,
                         int i) {
  using E = Elem<Cfg::elem>;
  constexpr int D = Cfg::head_dim, Dp = Cfg::head_dim_padded;
  float m = ws.softmax.m[i / kVecWidth][i % kVecWidth];
  float l = ws.softmax.l[i / kVecWidth][i % kVecWidth];
  float m_final = m;
  const float* sinks = Cfg::flags.sinks ? p.softmax_aux + g.h * p.num_sinks : nullptr;
  if constexpr (Cfg::flags.sinks)
    for (i64 s = 0; s < p.num_sinks; ++s) m_final = max_of(m_final, sinks[s]);

  E* out = static_cast<E*>(p.out) + g.o_off + i * p.o_stride_s;
  float* lse = p.lse + g.lse_off + i;
  if (m_final == neg_inf_f32()) {  // nothing visible and no sink: out 0, lse -inf
    for (int d = 0; d < D; ++d) out[d] = from_f32<Cfg::elem>(0.0f);
    *lse = neg_inf_f32();
    return;
  }
  const float correction = exp_approx(m - m_final);  // 0 when m = -inf (only sinks)
  float l_final = l * correction;
  if constexpr (Cfg::flags.sinks)
    for (i64 s = 0; s < p.num_sinks; ++s) l_final += exp_approx(sinks[s] - m_final);
  const float factor = p.normalize_output ? correction / l_final : correction;

  const float* o = ws.o + i * Dp;
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth)
    store_from_f32<Cfg::elem>(out + d, vload(o + d) * factor);
  for (; d < D; ++d) out[d] = from_f32<Cfg::elem>(o[d] * factor);
  *lse = m_final + log_approx(l_final);
}

template <class Cfg>
EJK_HD void run_task(const FlashFwdParams& p, const TaskGeometry& g, Workspace<Cfg>& ws) {
  using E = Elem<Cfg::elem>;
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim;
  pack_q_transposed<Cfg::elem, BQ, D>(static_cast<const E*>(p.q) + g.q_off, p.q_stride_s, g.rows,
                                      p.scale, ws.qt);
  for (int i = 0; i < BQ * Cfg::head_dim_padded; ++i) ws.o[i] = 0.0f;
  ws.softmax.reset();
  ws.ranges.init(variant_mask<Cfg>(p), g.q0, g.rows, g.seqlen_k);

  bool q_uniform = true;
  if (p.q_segment_ids) {
    const i32* qs = p.q_segment_ids + g.b * p.q_seg_stride_b + g.q0;
    for (int i = 0; i < g.rows; ++i) ws.q_seg[i] = qs[i];
    q_uniform = uniform_ids(ws.q_seg, g.rows);
  }
  // Keys no query of the block can see are never touched (causal / window skipping).
  const i64 k_begin = max_of((i64)ws.ranges.lo[0], (i64)0);
  const i64 k_end = min_of((i64)ws.ranges.hi[BQ - 1] + 1, g.seqlen_k);
  for (i64 k0 = k_begin; k0 < k_end; k0 += BK) {
    const int kn = (int)min_of((i64)BK, k_end - k0);
    const SegmentMask seg = classify_segments<Cfg>(p, g, ws, k0, kn, q_uniform);
    if (seg == SegmentMask::skip_block) continue;
    const int next_kn = (int)max_of((i64)0, min_of((i64)BK, k_end - (k0 + BK)));
    process_kv_block<Cfg>(p, g, ws, k0, kn, next_kn, seg == SegmentMask::per_pair);
  }
  for (int i = 0; i < g.rows; ++i) finalize_row<Cfg>(p, g, ws, i);
}

// Runs tasks [task_begin, task_end) of flash_fwd_num_tasks(p, Cfg::block_q).
template <class Cfg>
void flash_fwd_tasks(const FlashFwdParams& p, long long task_begin, long long task_end) {
  static_assert(sizeof(Workspace<Cfg>) <= kMaxWorkspaceBytes,
                "block_q x block_k x head_dim too large for the 512 KiB stack workspace");
  Workspace<Cfg> ws;
  TaskGeometry g;
  for (long long t = task_begin; t < task_end; ++t)
    if (decode_task(p, t, Cfg::block_q, g)) run_task<Cfg>(p, g, ws);
}

}  // namespace ejk::cpu
