// CPU flash attention backward (the math: common/flash_bwd_params.h). The task list is
// flash_bwd_tasks': dk/dv tasks (sequence, kv head, key block) walk the query tiles that see
// their keys; dq tasks (bias plane, query block) walk the key tiles each query block sees, and
// sum dbias over the (batch, head) pairs of their plane; sink tasks sum one sink row's gradient.
// Each output element is written by one task in a fixed order: the result does not depend on
// threads. Per (query tile, key tile) the work is tile products with f32 accumulation, on vector
// FMAs (flash_bwd_tile.h) or, for bf16 on AMX targets, on tiles (flash_bwd_amx.h); tiles the
// masks hide entirely are skipped before their operands load.
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cpu/amx.h"
#include "ejk/kernels/cpu/flash_bwd_amx.h"
#include "ejk/kernels/cpu/flash_bwd_rows.h"
#include "ejk/kernels/cpu/flash_bwd_tile.h"
#include "ejk/kernels/cpu/math.h"
#include "ejk/kernels/cpu/tiles.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

namespace bwd {

// Stack budget of a task's buffers (worker threads have 8 MiB stacks; the forward's is the
// same). The spec's constraint on block_q, block_k and head_dim keeps every variant inside.
inline constexpr long kBwdWorkspaceBytes = 512 * 1024;

// Accumulators start at zero and the tile products add into them: fma_product scales the C it
// accumulates onto by a factor per row, 1 here (exact).
template <int N> EJK_HD void zero(float* x) {
  for (int i = 0; i < N; ++i) x[i] = 0.0f;
}
template <int N> struct Ones {
  float v[N];
  EJK_HD Ones() {
    for (int i = 0; i < N; ++i) v[i] = 1.0f;
  }
};

// dk, dv of key block kb of kv head hk in sequence b: every query head of the group, every query
// tile that sees the keys, as tile products (flash_bwd_tile.h). Not inlined, so a range of
// tasks holds one task's buffers on the stack at a time.
template <class Cfg> __attribute__((noinline)) void kv_task(const FlashBwdParams& p, i64 b, i64 hk, i64 kb) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim, Dp = Cfg::padded_dim;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashFwdParams& f = p.fwd;
  const Seq s = seq_of(f, b);
  const i64 k_first = kb * BK;
  if (k_first >= s.sk) return;
  const int nk = int(min_of<i64>(BK, s.sk - k_first));
  constexpr bool kAmx = bwd_uses_amx<Cfg>();
  KeyTile<Cfg> kt;
  QueryTile<Cfg> qt;
  AmxKeyTile<Cfg> akt;
  AmxQueryTile<Cfg> aqt;
  alignas(64) float sp[BQ * BK], dp[BQ * BK], dk[BK * Dp], dv[BK * Dp];
  alignas(64) u16 pt[kAmx ? BK * BQ : 1], dxt[kAmx ? BK * BQ : 1];  // P^T, dX^T in bf16 (AMX)
  static_assert(sizeof kt + sizeof qt + sizeof akt + sizeof aqt + sizeof sp + sizeof dp + sizeof dk + sizeof dv +
                        sizeof pt + sizeof dxt <=
                    kBwdWorkspaceBytes,
                "block_q x block_k x head_dim too large for the 512 KiB stack workspace");
  const Ones<BK> ones;
  load_key_tile<Cfg>(p, s, hk, k_first, nk, kt);
  akt.load(p, s, hk, k_first, nk, false);
  zero<BK * Dp>(dk), zero<BK * Dp>(dv);
  TileMasks tm{variant_mask<F>(f.mask), false};
  const TileRange tiles = visible_query_tiles<bounded_mask(F)>(tm.mask, k_first, k_first + nk - 1, s.sq, BQ);
  const i64 group = f.heads_q / f.heads_kv;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h) {
    for (int tile = tiles.begin; tile < tiles.end; ++tile) {
      const i64 q_first = i64(tile) * BQ;
      const int nq = int(min_of<i64>(BQ, s.sq - q_first));
      if (bounded_mask(F) && classify_tile_for_keys(tm.mask, k_first, k_first + nk - 1, q_first, q_first + nq - 1,
                                                    s.sq) == TileClass::masked)
        continue;
      const DenseMaskTile dm = classify_dense_tile<Cfg>(f, s, h, q_first, nq, k_first, nk);
      if (dm == DenseMaskTile::none_visible) continue;  // hidden: Q and dO are not even loaded
      tm.dense_pairs = dm == DenseMaskTile::per_pair;
      if (!load_query_tile<Cfg>(p, s, h, q_first, nq, qt) || !segments_may_meet<Cfg>(qt, kt)) continue;
      if constexpr (kAmx) {
        aqt.load(p, s, h, q_first, nq);
        amx_product<Cfg, BQ, BK, D>(aqt.q, D, akt.kt, BK, sp, BK, false);
        amx_product<Cfg, BQ, BK, D>(aqt.d_out, D, akt.vt, BK, dp, BK, false);
        tile_gradients<Cfg>(p, s, h, qt, kt, tm, f.scale, sp, dp);
        // dV += P^T dO, dK += dX^T Q over every row of the tile (those past it are zero).
        transpose_to_bf16<BQ, BK>(sp, pt);
        transpose_to_bf16<BQ, BK>(dp, dxt);
        amx_product<Cfg, BK, D, BQ>(pt, BQ, reinterpret_cast<const u32*>(aqt.d_out_pairs), D, dv, Dp, true);
        amx_product<Cfg, BK, D, BQ>(dxt, BQ, reinterpret_cast<const u32*>(aqt.q_pairs), D, dk, Dp, true);
      } else {
        score_products<Cfg>(qt, kt, sp, dp);
        tile_gradients<Cfg>(p, s, h, qt, kt, tm, 1.0f, sp, dp);
        // dV += P^T dO, dK += dX^T Q: P and dX read transposed (keys are the product's rows).
        fma_product<Cfg, BK, Dp / kVecWidth>({sp, 1, BK}, qt.d_out, Dp, nq, dv, Dp, ones.v);
        fma_product<Cfg, BK, Dp / kVecWidth>({dp, 1, BK}, qt.q, Dp, nq, dk, Dp, ones.v);
      }
    }
  }
  // dK = scale * sum dX q: K was pre-scaled for S alone, the scale applies once here.
  const i64 k_row = s.k_row0 + k_first;
  store_rows<E, D, Dp>(p.dk, (s.varlen ? 0 : b * p.dk_stride_b) + k_row * p.dk_stride_s + hk * p.dk_stride_h,
                       p.dk_stride_s, nk, dk, f.scale);
  store_rows<E, D, Dp>(p.dv, (s.varlen ? 0 : b * p.dv_stride_b) + k_row * p.dv_stride_s + hk * p.dv_stride_h,
                       p.dv_stride_s, nk, dv, 1.0f);
}

// dbias rows [q_first, q_first + BQ) of plane (pb, ph), f32: the output itself when f32, else
// the workspace; zeroed here, summed by q_task, converted by finish_dbias.
struct DbiasRows {
  float* acc;
  i64 stride;
};
template <class Cfg> EJK_HD DbiasRows begin_dbias(const FlashBwdParams& p, i64 pb, i64 ph, i64 q_first) {
  const FlashFwdParams& f = p.fwd;
  DbiasRows r;
  if constexpr (Cfg::elem == ElemKind::f32) {
    r.acc = static_cast<float*>(p.dbias) + pb * p.dbias_stride_b + ph * p.dbias_stride_h + q_first * p.dbias_stride_q;
    r.stride = p.dbias_stride_q;
  } else {
    r.acc = p.dbias_work + ((pb * flash_bwd_planes(p).heads + ph) * f.seqlen_q + q_first) * f.seqlen_k;
    r.stride = f.seqlen_k;
  }
  const i64 rows = min_of<i64>(Cfg::block_q, f.seqlen_q - q_first);
  for (i64 i = 0; i < rows; ++i)
    for (i64 j = 0; j < f.seqlen_k; ++j) r.acc[i * r.stride + j] = 0.0f;
  return r;
}
template <class Cfg> EJK_HD void finish_dbias(const FlashBwdParams& p, i64 pb, i64 ph, i64 q_first, DbiasRows r) {
  constexpr ElemKind E = Cfg::elem;
  if constexpr (E != ElemKind::f32) {
    const FlashFwdParams& f = p.fwd;
    const i64 rows = min_of<i64>(Cfg::block_q, f.seqlen_q - q_first);
    auto* out = static_cast<Elem<E>*>(p.dbias);
    for (i64 i = 0; i < rows; ++i)
      for (i64 j = 0; j < f.seqlen_k; ++j)
        out[pb * p.dbias_stride_b + ph * p.dbias_stride_h + (q_first + i) * p.dbias_stride_q + j] =
            from_f32<E>(r.acc[i * r.stride + j]);
  }
}

// dbias[i][k_first + j] += dX[i][j] over a tile's rows and keys.
template <int BK> EJK_HD void add_dbias(DbiasRows r, i64 k_first, int rows, int keys, const float* dx) {
  for (int i = 0; i < rows; ++i) {
    float* row = r.acc + i * r.stride + k_first;
    int j = 0;
    for (; j + kVecWidth <= keys; j += kVecWidth) vstore(row + j, vload(row + j) + vload(dx + i * BK + j));
    for (; j < keys; ++j) row[j] += dx[i * BK + j];
  }
}

// dq of query block qb for every (batch, head) of bias plane (pb, ph), and that plane's dbias
// rows, summed over the pairs in a fixed order. Not inlined (see kv_task).
template <class Cfg> __attribute__((noinline)) void q_task(const FlashBwdParams& p, i64 pb, i64 ph, i64 qb) {
  constexpr ElemKind E = Cfg::elem;
  constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim, Dp = Cfg::padded_dim;
  constexpr AttentionFlags F = Cfg::flags;
  const FlashFwdParams& f = p.fwd;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const i64 group = f.heads_q / f.heads_kv;
  const bool with_dbias = F.bias && p.dbias;
  const i64 q_first = qb * BQ;
  const DbiasRows dbias = with_dbias ? begin_dbias<Cfg>(p, pb, ph, q_first) : DbiasRows{nullptr, 0};
  constexpr bool kAmx = bwd_uses_amx<Cfg>();
  KeyTile<Cfg> kt;
  QueryTile<Cfg> qt;
  AmxKeyTile<Cfg> akt;
  AmxQueryTile<Cfg> aqt;
  alignas(64) float sp[BQ * BK], dp[BQ * BK], k_rows[kAmx ? 1 : BK * Dp], dq[BQ * Dp];
  alignas(64) u16 dxb[kAmx ? BQ * BK : 1];  // dX in bf16 (AMX)
  static_assert(sizeof kt + sizeof qt + sizeof akt + sizeof aqt + sizeof sp + sizeof dp + sizeof k_rows + sizeof dq +
                        sizeof dxb <=
                    kBwdWorkspaceBytes,
                "block_q x block_k x head_dim too large for the 512 KiB stack workspace");
  const Ones<BQ> ones;
  TileMasks tm{variant_mask<F>(f.mask), false};
  for (i64 b = pb * pl.fold_b; b < (pb + 1) * pl.fold_b; ++b) {
    const Seq s = seq_of(f, b);
    if (q_first >= s.sq) continue;
    const int nq = int(min_of<i64>(BQ, s.sq - q_first));
    const TileRange tiles = visible_key_tiles<bounded_mask(F)>(tm.mask, q_first, q_first + nq - 1, s.sk, BK);
    for (i64 h = ph * pl.fold_h; h < (ph + 1) * pl.fold_h; ++h) {
      const i64 hk = h / group;
      zero<BQ * Dp>(dq);
      const bool live = load_query_tile<Cfg>(p, s, h, q_first, nq, qt);
      if (live) aqt.load(p, s, h, q_first, nq);
      for (int tile = tiles.begin; live && tile < tiles.end; ++tile) {
        const i64 k_first = i64(tile) * BK;
        const int nk = int(min_of<i64>(BK, s.sk - k_first));
        if (bounded_mask(F) &&
            classify_tile(tm.mask, q_first, q_first + nq - 1, k_first, k_first + nk - 1, s.sk) == TileClass::masked)
          continue;
        const DenseMaskTile dm = classify_dense_tile<Cfg>(f, s, h, q_first, nq, k_first, nk);
        if (dm == DenseMaskTile::none_visible) continue;  // hidden: K and V are not even loaded
        tm.dense_pairs = dm == DenseMaskTile::per_pair;
        load_key_tile<Cfg>(p, s, hk, k_first, nk, kt);
        if (!segments_may_meet<Cfg>(qt, kt)) continue;
        if constexpr (kAmx) {
          akt.load(p, s, hk, k_first, nk, true);
          amx_product<Cfg, BQ, BK, D>(aqt.q, D, akt.kt, BK, sp, BK, false);
          amx_product<Cfg, BQ, BK, D>(aqt.d_out, D, akt.vt, BK, dp, BK, false);
          tile_gradients<Cfg>(p, s, h, qt, kt, tm, f.scale, sp, dp);
          round_to_bf16<BQ, BK>(dp, dxb);  // dQ += dX K over every key of the tile (those past it are zero)
          amx_product<Cfg, BQ, D, BK>(dxb, BK, reinterpret_cast<const u32*>(akt.k_pairs), D, dq, Dp, true);
        } else {
          const i64 k_at = at(s, s.k_row0, k_first, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h);
          pack_rows<E>(static_cast<const Elem<E>*>(f.k) + k_at, f.k_stride_s, nk, nk, D, k_rows, Dp);
          score_products<Cfg>(qt, kt, sp, dp);
          tile_gradients<Cfg>(p, s, h, qt, kt, tm, 1.0f, sp, dp);
          fma_product<Cfg, BQ, Dp / kVecWidth>({dp, BK, 1}, k_rows, Dp, nk, dq, Dp, ones.v);  // dQ += dX K
        }
        if (with_dbias) add_dbias<BK>(dbias, k_first, nq, nk, dp);
      }
      store_rows<E, D, Dp>(p.dq, at(s, s.q_row0, q_first, h, p.dq_stride_b, p.dq_stride_s, p.dq_stride_h),
                           p.dq_stride_s, nq, dq, f.scale);
    }
  }
  if (with_dbias) finish_dbias<Cfg>(p, pb, ph, q_first, dbias);
}

// dsoftmax_aux of sink row hs: head hs's sinks, or (shared sinks) every head's. Summed in double
// per sink: terms of both signs over every row of the heads, whose sum is often far smaller.
template <class Cfg> __attribute__((noinline)) void sink_task(const FlashBwdParams& p, i64 hs) {
  constexpr int BQ = Cfg::block_q;
  constexpr int kChunk = 16;  // sinks summed per pass over the rows
  const FlashFwdParams& f = p.fwd;
  const bool shared = f.sinks_stride_h == 0;
  float* ds = p.dsoftmax_aux + hs * f.num_sinks;
  const float* sinks = f.softmax_aux + hs * f.sinks_stride_h;
  QueryTile<Cfg> qt;
  for (i64 t0 = 0; t0 < f.num_sinks; t0 += kChunk) {
    const int nt = int(min_of<i64>(kChunk, f.num_sinks - t0));
    double acc[kChunk] = {};
    for (i64 h = shared ? 0 : hs; h < (shared ? f.heads_q : hs + 1); ++h)
      for (i64 b = 0; b < f.batch; ++b) {
        const Seq s = seq_of(f, b);
        for (i64 q_first = 0; q_first < s.sq; q_first += BQ) {
          const int nq = int(min_of<i64>(BQ, s.sq - q_first));
          if (!load_query_tile<Cfg>(p, s, h, q_first, nq, qt)) continue;
          for (int i = 0; i < nq; ++i) {
            if (qt.lse[i] == neg_inf_f32()) continue;
            for (int t = 0; t < nt; ++t) acc[t] -= double(exp_approx(sinks[t0 + t] - qt.lse[i])) * double(qt.delta[i]);
          }
        }
      }
    for (int t = 0; t < nt; ++t) ds[t0 + t] = float(acc[t]);
  }
}

}  // namespace bwd

// Tasks [task_begin, task_end) of flash_bwd_tasks(p, block_q, block_k), one after the other.
template <class Cfg> void flash_bwd_task_range(const FlashBwdParams& p, long long task_begin, long long task_end) {
  const FlashFwdParams& f = p.fwd;
  const FlashBwdTasks n = flash_bwd_tasks(p, Cfg::block_q, Cfg::block_k);
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, Cfg::block_k), qblocks = ceil_div<i64>(f.seqlen_q, Cfg::block_q);
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < n.kv) {
      bwd::kv_task<Cfg>(p, t / (f.heads_kv * kblocks), t / kblocks % f.heads_kv, t % kblocks);
    } else if (t < n.kv + n.q) {
      const i64 u = t - n.kv;
      bwd::q_task<Cfg>(p, u / (pl.heads * qblocks), u / qblocks % pl.heads, u % qblocks);
    } else {
      if constexpr (Cfg::flags.sinks) bwd::sink_task<Cfg>(p, t - n.kv - n.q);
    }
  }
}

// Runs tasks [task_begin, task_end) of flash_bwd_tasks(p, block_q, block_k): on AMX tiles where
// bwd_uses_amx<Cfg> (the tile state configured for the range, released after), else on FMAs.
template <class Cfg> void flash_bwd_tasks(const FlashBwdParams& p, long long task_begin, long long task_end) {
#if EJK_CPU_AMX
  if constexpr (bwd::bwd_uses_amx<Cfg>()) {
    // The runtime picks an AMX target only where the OS grants the tile state (as the forward).
    if (!amx::request_permission()) __builtin_trap();
    amx::configure();
    flash_bwd_task_range<Cfg>(p, task_begin, task_end);
    amx::release();
    return;
  }
#endif
  flash_bwd_task_range<Cfg>(p, task_begin, task_end);
}

}  // namespace ejk::cpu
