// The portable engine of the CPU flash kernel: float32 vector FMAs (AVX-512, AVX2 or SSE).
// Per task Q^T (scaled, float32) is packed once; per kv block K and V rows are packed to
// float32 and
//     S^T[key][query] = K . Q^T            (fma_gemm, queries along vector lanes)
//     O[query][d] = alpha * O + P . V      (fma_gemm, alpha folded into the tile load)
// with the softmax of task.h in between.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cpu/task.h"
#include "ejk/kernels/cpu/tiles.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

template <class Cfg> struct FmaEngine {
  static constexpr int BQ = Cfg::block_q, BK = Cfg::block_k, D = Cfg::head_dim;
  // Rows of the V block and of the output accumulator are padded to whole vectors.
  static constexpr int Dp = (D + kVecWidth - 1) / kVecWidth * kVecWidth;
  static_assert(BQ % kVecWidth == 0,
                "block_q must be a multiple of the vector width (16 with AVX-512, 8 with AVX2, 4)");

  alignas(64) float qt[D * BQ];  // Q^T * scale                            (D, BQ)
  alignas(64) float kb[BK * D];  // K block, zero rows past its end        (BK, D)
  alignas(64) float vb[BK * Dp]; // V block                                (BK, Dp)
  alignas(64) float st[BK * BQ]; // scores, then probabilities, transposed (BK, BQ)
  alignas(64) float o[BQ * Dp];  // output accumulator                     (BQ, Dp)

  EJK_HD void begin_task(const FlashFwdParams& p, const TaskGeometry& g) {
    using E = Elem<Cfg::elem>;
    pack_q_transposed<Cfg::elem, BQ, D>(static_cast<const E*>(p.q) + g.q_off, p.q_stride_s,
                                        g.rows, p.scale, qt);
    for (int i = 0; i < BQ * Dp; ++i) o[i] = 0.0f;
  }

  EJK_HD void process_block(const FlashFwdParams& p, const TaskGeometry& g, TaskState<Cfg>& ts,
                            const KvBlock& blk) {
    using E = Elem<Cfg::elem>;
    const E* k = static_cast<const E*>(p.k) + g.k_off + blk.k0 * p.k_stride_s;
    const E* v = static_cast<const E*>(p.v) + g.v_off + blk.k0 * p.v_stride_s;
    pack_rows<Cfg::elem>(k, p.k_stride_s, blk.kn, BK, D, kb, D);
    pack_rows<Cfg::elem>(v, p.v_stride_s, blk.kn, blk.kn, D, vb, Dp);

    // The next block's rows stream in during this block's first product.
    BlockPrefetcher next = block_prefetcher<Cfg>(p, g, blk.k0 + BK, blk.next_kn);
    fma_gemm<BK, BQ / kVecWidth>({kb, D, 1}, qt, BQ, D, st, BQ, false, nullptr, next);
    // The rescale is free here (folded into the P.V tile load): track the exact max.
    scores_to_probabilities<Cfg, /*kScale=*/false>(p, g, ts, st, blk, /*rescale_threshold=*/0.0f,
                                                   InPlaceProbabilities<BQ>{st});
    if constexpr (Cfg::flags.dropout) drop_probabilities<Cfg>(p, g, st, blk);
    NoPrefetch none;
    fma_gemm<BQ, Dp / kVecWidth>({st, 1, BQ}, vb, Dp, blk.kn, o, Dp, true, ts.softmax.alpha, none);
  }

  EJK_HD void finish_task() {}
  EJK_HD const float* out_row(int i) const { return o + i * Dp; }
};

}  // namespace ejk::cpu
