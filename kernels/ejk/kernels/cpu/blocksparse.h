// CPU block-sparse attention, forward and backward (the math: common/blocksparse_params.h).
// The forward is the flash kernel's task (task.h: geometry, segment handling, online softmax,
// finalization; fma_engine.h: the two products) with its key walk replaced by the query block's
// list: it visits only listed key blocks, clipped to the keys its queries see by position, in
// tiles of block_k keys, on the FMA engine or (bf16, AMX targets) the AMX engine. Blocks listed
// as fully visible skip the segment classification; the position mask of a tile is decided by
// the tile classifier as in flash attention.
// The backward reuses flash_bwd.h's rows, pair gradients and sink tasks with the same lists: dk/dv
// tasks walk a key block's column, dq tasks its row. Each output element is written by one task
// in a fixed order, so results do not depend on threads.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/blocksparse_params.h"
#include "ejk/kernels/cpu/flash_bwd.h"
#include "ejk/kernels/cpu/flash_fwd.h"

namespace ejk::cpu {

// One forward task: queries [g.q0, g.q0 + g.rows) of (g.b, g.h), all inside one layout row (the
// runtime makes block_q divide the layout's).
template <class Cfg, class Engine>
EJK_HD void bsa_fwd_task(const BlocksparseFwdParams& bp, const TaskGeometry& g, TaskState<Cfg>& ts,
                         Engine& engine) {
  constexpr int BK = Cfg::block_k;
  const FlashFwdParams& p = bp.f;
  const BlocksparseLists& l = bp.lists;
  begin_task_state<Cfg>(p, g, ts);
  engine.begin_task(p, g);
  const PositionSpan keys =
      block_visible_keys<bounded_mask(Cfg::flags)>(ts.mask, g.q0, g.q0 + g.rows - 1, g.seqlen_k);
  const i64 row = bsa_row(l, g.b, g.h, g.q0 / l.block_q);
  for (i32 e = l.row_offsets[row]; e < l.row_offsets[row + 1]; ++e) {
    const i32 entry = l.row_entries[e];
    const i64 kb = bsa_entry_block(entry);
    const i64 lo = max_of(kb * l.block_k, keys.first), hi = min_of((kb + 1) * l.block_k, keys.last + 1);
    for (i64 k0 = lo; k0 < hi; k0 += BK) {
      KvBlock blk;
      blk.k0 = k0;
      blk.kn = (int)min_of((i64)BK, hi - k0);
      blk.next_kn = (int)max_of((i64)0, min_of((i64)BK, hi - (k0 + BK)));
      blk.segment_pairs = false;
      if (!bsa_entry_full(entry)) {
        const SegmentMask seg = classify_segments<Cfg>(p, g, ts, k0, blk.kn);
        if (seg == SegmentMask::skip_block) continue;
        blk.segment_pairs = seg == SegmentMask::per_pair;
      }
      engine.process_block(p, g, ts, blk);
    }
  }
  engine.finish_task();
  for (int i = 0; i < g.rows; ++i) finalize_row<Cfg>(p, g, ts, engine.out_row(i), i);
}

// Tasks [task_begin, task_end) of flash_fwd_num_tasks(bp.f, Cfg::block_q), on the engine
// flash attention's forward would use (run_forward_tasks). Both engines take key blocks in any
// order, which the lists need.
template <class Cfg>
void bsa_fwd_tasks(const BlocksparseFwdParams& bp, long long task_begin, long long task_end) {
  run_forward_tasks<Cfg>(bp.f, task_begin, task_end, [&](const TaskGeometry& g, TaskState<Cfg>& state, auto& engine) {
    bsa_fwd_task<Cfg>(bp, g, state, engine);
  });
}

namespace bsa {

// Keys [j0, j1] of a tile starting at k_first (nk keys) that query i sees by position; the
// whole tile when its layout block is fully visible.
template <class Cfg>
EJK_HD void tile_keys(const MaskSpec& m, bool full, i64 i, i64 k_first, int nk, i64 sk, int& j0, int& j1) {
  if (full) {
    j0 = 0, j1 = nk - 1;
    return;
  }
  const PositionSpan ks = block_visible_keys<bounded_mask(Cfg::flags)>(m, i, i, sk);
  j0 = int(max_of<i64>(ks.first - k_first, 0)), j1 = int(min_of<i64>(ks.last - k_first, nk - 1));
}

// dk, dv of keys [kt * block_k, ...) of kv head hk in sequence b: every query head of the group,
// the query blocks of each head's column (the runtime makes block_k divide the layout's).
template <class Cfg> void kv_task(const BlocksparseBwdParams& bp, i64 b, i64 hk, i64 kt) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int D = Cfg::head_dim, BK = Cfg::block_k;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashBwdParams& p = bp.g;
  const FlashFwdParams& f = p.fwd;
  const BlocksparseLists& l = bp.lists;
  const bwd::Seq s = bwd::seq_of(f, b);
  const i64 k_first = kt * BK;
  if (k_first >= s.sk) return;
  const int nk = int(min_of<i64>(BK, s.sk - k_first));
  float kt_rows[BK][D], vt_rows[BK][D], dk[BK][D], dv[BK][D], scratch[D];
  for (int j = 0; j < nk; ++j) {
    bwd::load_row<E, D>(f.k, bwd::at(s, 0, k_first + j, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h), kt_rows[j]);
    bwd::load_row<E, D>(f.v, bwd::at(s, 0, k_first + j, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h), vt_rows[j]);
    for (int d = 0; d < D; ++d) dk[j][d] = dv[j][d] = 0.0f;
  }
  const MaskSpec m = variant_mask<F>(f.mask);
  const PositionSpan qs = block_visible_queries<bounded_mask(F)>(m, k_first, k_first + nk - 1, s.sq);
  const i64 kb = k_first / l.block_k, group = f.heads_q / f.heads_kv;
  bwd::QueryRow<Cfg> r;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
    const i64 col = bsa_col(l, b, h, kb);
    for (i32 e = l.col_offsets[col]; e < l.col_offsets[col + 1]; ++e) {
      const i64 qb = bsa_entry_block(l.col_entries[e]);
      const bool full = bsa_entry_full(l.col_entries[e]);
      const i64 i_lo = max_of(qb * l.block_q, qs.first), i_hi = min_of((qb + 1) * l.block_q - 1, qs.last);
      for (i64 i = i_lo; i <= i_hi; ++i) {
        if (!bwd::load_query<Cfg>(p, s, h, i, r, scratch)) continue;
        int j0, j1;
        tile_keys<Cfg>(m, full, i, k_first, nk, s.sk, j0, j1);
        for (int j = j0; j <= j1; ++j) {
          float prob, dx;
          if (!bwd::pair_grad<Cfg>(p, r, s, h, i, k_first + j, kt_rows[j], vt_rows[j], prob, dx)) continue;
          bwd::axpy<D>(dv[j], prob, r.d_out);
          bwd::axpy<D>(dk[j], dx * f.scale, r.q);
        }
      }
    }
  }
  for (int j = 0; j < nk; ++j) {
    bwd::store_row<E, D>(p.dk, bwd::at(s, 0, k_first + j, hk, p.dk_stride_b, p.dk_stride_s, p.dk_stride_h), dk[j]);
    bwd::store_row<E, D>(p.dv, bwd::at(s, 0, k_first + j, hk, p.dv_stride_b, p.dv_stride_s, p.dv_stride_h), dv[j]);
  }
}

// dq of queries [qt * block_q, ...) of head h in sequence b: the key blocks of their row, K and V
// loaded once per tile for every query of the block.
template <class Cfg> void q_task(const BlocksparseBwdParams& bp, i64 b, i64 h, i64 qt) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int D = Cfg::head_dim, BQ = Cfg::block_q, BK = Cfg::block_k;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashBwdParams& p = bp.g;
  const FlashFwdParams& f = p.fwd;
  const BlocksparseLists& l = bp.lists;
  const bwd::Seq s = bwd::seq_of(f, b);
  const i64 q_first = qt * BQ;
  if (q_first >= s.sq) return;
  const int nq = int(min_of<i64>(BQ, s.sq - q_first));
  const i64 hk = h / (f.heads_q / f.heads_kv);
  const MaskSpec m = variant_mask<F>(f.mask);
  bwd::QueryRow<Cfg> rows[BQ];
  bool live[BQ];
  float dq[BQ][D], kt_rows[BK][D], vt_rows[BK][D], scratch[D];
  for (int qi = 0; qi < nq; ++qi) {
    live[qi] = bwd::load_query<Cfg>(p, s, h, q_first + qi, rows[qi], scratch);
    for (int d = 0; d < D; ++d) dq[qi][d] = 0.0f;
  }
  const PositionSpan keys = block_visible_keys<bounded_mask(F)>(m, q_first, q_first + nq - 1, s.sk);
  const i64 row = bsa_row(l, b, h, q_first / l.block_q);
  for (i32 e = l.row_offsets[row]; e < l.row_offsets[row + 1]; ++e) {
    const i64 kb = bsa_entry_block(l.row_entries[e]);
    const bool full = bsa_entry_full(l.row_entries[e]);
    const i64 lo = max_of(kb * l.block_k, keys.first), hi = min_of((kb + 1) * l.block_k, keys.last + 1);
    for (i64 k_first = lo; k_first < hi; k_first += BK) {
      const int nk = int(min_of<i64>(BK, hi - k_first));
      for (int j = 0; j < nk; ++j) {
        bwd::load_row<E, D>(f.k, bwd::at(s, 0, k_first + j, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h), kt_rows[j]);
        bwd::load_row<E, D>(f.v, bwd::at(s, 0, k_first + j, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h), vt_rows[j]);
      }
      for (int qi = 0; qi < nq; ++qi) {
        if (!live[qi]) continue;
        const i64 i = q_first + qi;
        int j0, j1;
        tile_keys<Cfg>(m, full, i, k_first, nk, s.sk, j0, j1);
        for (int j = j0; j <= j1; ++j) {
          float prob, dx;
          if (!bwd::pair_grad<Cfg>(p, rows[qi], s, h, i, k_first + j, kt_rows[j], vt_rows[j], prob, dx)) continue;
          bwd::axpy<D>(dq[qi], dx * f.scale, kt_rows[j]);
        }
      }
    }
  }
  for (int qi = 0; qi < nq; ++qi)
    bwd::store_row<E, D>(p.dq, bwd::at(s, 0, q_first + qi, h, p.dq_stride_b, p.dq_stride_s, p.dq_stride_h), dq[qi]);
}

}  // namespace bsa

// Runs tasks [task_begin, task_end) of bsa_bwd_tasks(bp, block_q, block_k).
template <class Cfg> void bsa_bwd_tasks(const BlocksparseBwdParams& bp, long long task_begin, long long task_end) {
  const FlashFwdParams& f = bp.g.fwd;
  const FlashBwdTasks n = bsa_bwd_tasks(bp, Cfg::block_q, Cfg::block_k);
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, Cfg::block_k), qblocks = ceil_div<i64>(f.seqlen_q, Cfg::block_q);
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < n.kv) {
      bsa::kv_task<Cfg>(bp, t / (f.heads_kv * kblocks), t / kblocks % f.heads_kv, t % kblocks);
    } else if (t < n.kv + n.q) {
      const i64 u = t - n.kv;
      bsa::q_task<Cfg>(bp, u / (f.heads_q * qblocks), u / qblocks % f.heads_q, u % qblocks);
    } else {
      if constexpr (Cfg::flags.sinks) bwd::sink_task<Cfg>(bp.g, t - n.kv - n.q);
    }
  }
}

}  // namespace ejk::cpu
