// What every engine of the CPU flash kernel shares per task: where the task's data lives,
// which kv blocks it visits, segment handling, the per-row softmax state and the final
// normalization that writes out and lse. The engines (fma_engine.h, amx_engine.h) differ only
// in how they compute S^T = K.Q^T and O += P.V.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/softmax.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

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

// One kv block of a task: keys [k0, k0 + kn); the next block has next_kn keys (0: none).
struct KvBlock {
  i64 k0;
  int kn, next_kn;
  bool segment_pairs;  // segment ids differ inside the block: mask pair by pair
  bool dense_pairs = false;  // the dense mask hides some pair of the block: mask pair by pair
};

// Software prefetch of the rows of the next kv block into L2, one cache line per step of a
// product's depth loop, so the lines arrive while the FMA units are busy. K and V rows are
// heads * head_dim elements apart (pages apart), which the hardware prefetchers do not follow.
struct RowPrefetcher {
  static constexpr int kLine = 64;
  const char* row = nullptr;  // row being prefetched
  i64 stride = 0;             // bytes between rows
  int lines_per_row = 0;
  int rows_left = 0;
  int line = 0;

  EJK_HD void step() {
    if (rows_left <= 0) return;
    __builtin_prefetch(row + line * kLine, /*read*/ 0, /*into L2*/ 2);
    if (++line == lines_per_row) {
      line = 0;
      row += stride;
      --rows_left;
    }
  }
  // All lines of the next row at once (for loops with few, long iterations).
  EJK_HD void step_row() {
    if (rows_left <= 0) return;
    for (int l = 0; l < lines_per_row; ++l) __builtin_prefetch(row + l * kLine, 0, 2);
    row += stride;
    --rows_left;
  }
};

// Interleaves two row streams (the next K block and the next V block).
struct BlockPrefetcher {
  RowPrefetcher k, v;
  EJK_HD void step() {
    k.step();
    v.step();
  }
  EJK_HD void step_row() {
    k.step_row();
    v.step_row();
  }
};

// The K and V rows of the kv block [k0, k0 + kn), to prefetch while another block computes.
template <class Cfg>
EJK_HD BlockPrefetcher block_prefetcher(const FlashFwdParams& p, const TaskGeometry& g, i64 k0,
                                        int kn) {
  using E = Elem<Cfg::elem>;
  constexpr int kRowBytes = Cfg::head_dim * (int)sizeof(E);
  constexpr int kLines = (kRowBytes + RowPrefetcher::kLine - 1) / RowPrefetcher::kLine;
  const E* k = static_cast<const E*>(p.k) + g.k_off + k0 * p.k_stride_s;
  const E* v = static_cast<const E*>(p.v) + g.v_off + k0 * p.v_stride_s;
  BlockPrefetcher pf;
  pf.k = {reinterpret_cast<const char*>(k), p.k_stride_s * (i64)sizeof(E), kLines, kn, 0};
  pf.v = {reinterpret_cast<const char*>(v), p.v_stride_s * (i64)sizeof(E), kLines, kn, 0};
  return pf;
}

// Per-task state every engine needs next to its own buffers.
template <class Cfg> struct TaskState {
  static constexpr int BQ = Cfg::block_q, BK = Cfg::block_k;
  SoftmaxState<BQ> softmax;
  RowRanges<BQ> ranges;
  MaskSpec mask;   // the variant's (variant_mask)
  i32 q_seg[BQ], kv_seg[BK];
  bool q_uniform;  // all queries of the block in one segment
};

// All n ids equal? Then one segment_visible call decides for the whole block.
EJK_HD bool uniform_ids(const i32* ids, int n) {
  for (int i = 1; i < n; ++i)
    if (ids[i] != ids[0]) return false;
  return true;
}

enum class SegmentMask { none, per_pair, skip_block };

// Segment handling of the kv block [k0, k0 + kn); loads its ids into ts.kv_seg. Variants
// without the segments flag compile none of it (the runtime never gives them ids).
template <class Cfg>
EJK_HD SegmentMask classify_segments(const FlashFwdParams& p, const TaskGeometry& g,
                                     TaskState<Cfg>& ts, i64 k0, int kn) {
  if constexpr (Cfg::flags.segments) {
    if (p.q_segment_ids) {
      const i32* kv = p.kv_segment_ids + g.b * p.kv_seg_stride_b + k0;
      for (int j = 0; j < kn; ++j) ts.kv_seg[j] = kv[j];
      if (!ts.q_uniform || !uniform_ids(ts.kv_seg, kn)) return SegmentMask::per_pair;
      return segment_visible(ts.q_seg[0], ts.kv_seg[0]) ? SegmentMask::none
                                                        : SegmentMask::skip_block;
    }
  }
  return SegmentMask::none;
}

enum class DenseMaskTile { all_visible, per_pair, none_visible };

// Folds n mask bytes of a row into `any` (some visible) and `all` (every one visible), eight bytes
// a step: a word has a zero byte iff (w - 0x01..01) & ~w & 0x80..80 is nonzero (exact).
EJK_HD void scan_mask_row(const u8* row, int n, bool& any, bool& all) {
  constexpr unsigned long long kOnes = 0x0101010101010101ull, kHighs = 0x8080808080808080ull;
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    unsigned long long w;
    __builtin_memcpy(&w, row + j, 8);
    any |= w != 0;
    all &= ((w - kOnes) & ~w & kHighs) == 0;
  }
  for (; j < n; ++j) {
    const bool visible = dense_mask_visible(row, j);
    any |= visible;
    all &= visible;
  }
}

// What the dense mask says about the block's rows and keys [k0, k0 + kn): a byte scan, far
// cheaper than the block's products, so a block it hides entirely is never computed.
template <class Cfg>
EJK_HD DenseMaskTile classify_dense_mask(const FlashFwdParams& p, const TaskGeometry& g, i64 k0, int kn) {
  const u8* row = flash_mask_row(p, g.b, g.h, g.q0) + k0;
  bool any = false, all = true;
  // Row by row, stopping once both a visible and a hidden pair are seen (the block is partial).
  for (int i = 0; i < g.rows && !(any && !all); ++i, row += p.mask_stride_q) scan_mask_row(row, kn, any, all);
  return !any ? DenseMaskTile::none_visible : all ? DenseMaskTile::all_visible : DenseMaskTile::per_pair;
}

// Scores st[key][query] (kn x kRows) of pairs the dense mask hides become -inf.
template <int kRows>
EJK_HD void mask_dense(float* st, int kn, int rows, const u8* row, i64 row_stride) {
  for (int i = 0; i < rows; ++i, row += row_stride)
    for (int j = 0; j < kn; ++j)
      if (!dense_mask_visible(row, j)) st[j * kRows + i] = neg_inf_f32();
}

// Softmax state, visible ranges and segment ids of a fresh task.
template <class Cfg>
EJK_HD void begin_task_state(const FlashFwdParams& p, const TaskGeometry& g, TaskState<Cfg>& ts) {
  ts.softmax.reset();
  ts.mask = variant_mask<Cfg::flags>(p.mask);
  ts.ranges.init(ts.mask, g.q0, g.rows, g.seqlen_k);
  ts.q_uniform = true;
  if constexpr (Cfg::flags.segments) {
    if (p.q_segment_ids) {
      const i32* qs = p.q_segment_ids + g.b * p.q_seg_stride_b + g.q0;
      for (int i = 0; i < g.rows; ++i) ts.q_seg[i] = qs[i];
      ts.q_uniform = uniform_ids(ts.q_seg, g.rows);
    }
  }
}

// Scores of one block, st[key][query] (kn x BQ), to probabilities (through `probabilities`,
// see softmax_block): scale (kScale: the engine did not fold it into Q), bias and softcap,
// segment and position masks, online softmax. The scale is folded into the softmax's own
// multiply-add unless the logit transform needs scaled values first (or the scale is not
// positive, where the max of raw scores would not be the max of the logits).
// Returns whether some output row must be rescaled (see softmax_block).
template <class Cfg, bool kScale, class Probabilities>
EJK_HD bool scores_to_probabilities(const FlashFwdParams& p, const TaskGeometry& g,
                                    TaskState<Cfg>& ts, float* st, const KvBlock& blk,
                                    float rescale_threshold, const Probabilities& probabilities) {
  using E = Elem<Cfg::elem>;
  constexpr int BQ = Cfg::block_q;
  constexpr bool kTransform = Cfg::flags.bias || Cfg::flags.softcap;
  float softmax_scale = 1.0f;
  if constexpr (kScale) {
    if (kTransform || !(p.scale > 0.0f)) scale_scores<BQ>(st, blk.kn, p.scale);
    else softmax_scale = p.scale;
  }
  if constexpr (kTransform) {
    const E* bias =
        Cfg::flags.bias ? static_cast<const E*>(p.bias) + g.bias_off + blk.k0 : nullptr;
    transform_logits<Cfg::flags.bias, Cfg::flags.softcap, Cfg::elem, BQ>(
        st, blk.kn, g.rows, bias, p.bias_stride_q, p.softcap);
  }
  if constexpr (Cfg::flags.segments)
    if (blk.segment_pairs) mask_segments<BQ>(st, blk.kn, g.rows, ts.q_seg, ts.kv_seg);
  if constexpr (Cfg::flags.dense_mask)
    if (blk.dense_pairs)
      mask_dense<BQ>(st, blk.kn, g.rows, flash_mask_row(p, g.b, g.h, g.q0) + blk.k0, p.mask_stride_q);
  // Blocks never reach past the sequence end (run_task), so position alone decides.
  const bool mask_positions = !tile_fully_visible<bounded_mask(Cfg::flags)>(
      ts.mask, g.q0, g.q0 + g.rows - 1, blk.k0, blk.k0 + blk.kn - 1);
  return softmax_block<BQ>(ts.softmax, st, blk.kn, blk.k0, mask_positions, ts.ranges,
                           softmax_scale, rescale_threshold, probabilities);
}

// Dropout of one block's probabilities st[key][query] (kn x BQ) in place, after softmax_block
// summed them into l (the denominator does not see dropout) and before they weight V. One
// Philox block serves four keys of a row (common/philox.h); blocks start at any key.
template <class Cfg>
EJK_HD void drop_probabilities(const FlashFwdParams& p, const TaskGeometry& g, float* st, const KvBlock& blk) {
  constexpr int BQ = Cfg::block_q;
  const DropoutParams& d = flash_dropout(p);
  for (int i = 0; i < g.rows; ++i) {
    const i64 q = g.q0 + i;
    for (int j = 0; j < blk.kn;) {
      const i64 key = blk.k0 + j;
      const Philox4 words = dropout_words(d, g.b, g.h, q, key);
      const int end = (int)min_of<i64>(blk.kn, j + 4 - (key & 3));
      for (; j < end; ++j)
        st[j * BQ + i] *= dropout_keep_word(d, words.w[(blk.k0 + j) & 3]) ? d.scale : 0.0f;
    }
  }
}

// Folds the sinks into row i's statistics and writes its output row (from the float32
// accumulator row o, relative to the reference max m) and its lse. The final max is the true
// one (mask.h: the unnormalized output is relative to the max over logits and sinks).
template <class Cfg>
EJK_HD void finalize_row(const FlashFwdParams& p, const TaskGeometry& g, const TaskState<Cfg>& ts,
                         const float* o, int i) {
  using E = Elem<Cfg::elem>;
  constexpr int D = Cfg::head_dim;
  const float m = ts.softmax.m[i / kVecWidth][i % kVecWidth];
  const float l = ts.softmax.l[i / kVecWidth][i % kVecWidth];
  float m_final = ts.softmax.seen[i / kVecWidth][i % kVecWidth];
  const float* sinks = Cfg::flags.sinks ? p.softmax_aux + g.h * p.sinks_stride_h : nullptr;
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

  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth)
    store_from_f32<Cfg::elem>(out + d, vload(o + d) * factor);
  for (; d < D; ++d) out[d] = from_f32<Cfg::elem>(o[d] * factor);
  *lse = m_final + log_approx(l_final);
}

// One task with an engine (the engine owns Q/K/V/S/O buffers and the two products; it may
// hold back work until finish_task).
template <class Cfg, class Engine>
EJK_HD void run_task(const FlashFwdParams& p, const TaskGeometry& g, TaskState<Cfg>& ts,
                     Engine& engine) {
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k;
  begin_task_state<Cfg>(p, g, ts);
  engine.begin_task(p, g);
  // Keys no query of the block can see are never touched (causal / window skipping): blocks
  // start at the first visible key (not at a tile boundary) and end at the last.
  const PositionSpan keys = block_visible_keys<bounded_mask(Cfg::flags)>(
      ts.mask, g.q0, g.q0 + g.rows - 1, g.seqlen_k);
  const i64 k_begin = keys.first, k_end = keys.last + 1;
  for (i64 k0 = k_begin; k0 < k_end; k0 += BK) {
    KvBlock blk;
    blk.k0 = k0;
    blk.kn = (int)min_of((i64)BK, k_end - k0);
    blk.next_kn = (int)max_of((i64)0, min_of((i64)BK, k_end - (k0 + BK)));
    const SegmentMask seg = classify_segments<Cfg>(p, g, ts, k0, blk.kn);
    if (seg == SegmentMask::skip_block) continue;
    blk.segment_pairs = seg == SegmentMask::per_pair;
    if constexpr (Cfg::flags.dense_mask) {
      const DenseMaskTile dm = classify_dense_mask<Cfg>(p, g, k0, blk.kn);
      if (dm == DenseMaskTile::none_visible) continue;
      blk.dense_pairs = dm == DenseMaskTile::per_pair;
    }
    engine.process_block(p, g, ts, blk);
  }
  engine.finish_task();
  for (int i = 0; i < g.rows; ++i) finalize_row<Cfg>(p, g, ts, engine.out_row(i), i);
}

}  // namespace ejk::cpu
