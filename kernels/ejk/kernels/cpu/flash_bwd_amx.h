// The bf16 products of the CPU flash attention backward on Intel AMX tiles (amx.h), for
// variants whose head_dim, block_q and block_k are multiples of 32: the same five products as
// the FMA path (flash_bwd.h), with bf16 operands and f32 accumulation,
//     S = Q K^T, dP = dO V^T            (block_q x block_k; the scale is applied by tile_gradients)
//     dV += P^T dO, dK += dX^T Q        (keys x head_dim, over the tile's queries)
//     dQ += dX K                        (queries x head_dim, over the tile's keys)
// P and dX are rounded to bf16 for the last three (as the GPU kernels do). Right operands are
// in VNNI layout: row p holds rows 2p and 2p + 1 of the operand, interleaved.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cpu/amx.h"
#include "ejk/kernels/cpu/flash_bwd_tile.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu::bwd {

#if EJK_CPU_AMX

// C[M][N] (f32, ldc floats) (+)= A[M][depth] (bf16 rows, lda elements) . B (VNNI, depth / 2 rows of
// N pairs, ldb pairs): 2 x 2 blocks of 16 x 16 tiles, tmm0-3 accumulating, tmm4-5 A, tmm6-7 B.
template <int M, int N, int kDepth>
EJK_HD void amx_gemm(const u16* a, i64 lda, const u32* b, i64 ldb, float* c, i64 ldc, bool accumulate) {
  static_assert(M % 32 == 0 && N % 32 == 0 && kDepth % 32 == 0, "AMX products take multiples of 32");
  constexpr int T = amx::kTileRows;
  const i64 kA = lda * 2, kB = ldb * 4, kC = ldc * 4;
  for (int mt = 0; mt < M / T; mt += 2)
    for (int nt = 0; nt < N / T; nt += 2) {
      float* c00 = c + mt * T * ldc + nt * T;
      if (accumulate) {
        amx::load<0>(c00, kC);
        amx::load<1>(c00 + T, kC);
        amx::load<2>(c00 + T * ldc, kC);
        amx::load<3>(c00 + T * ldc + T, kC);
      } else {
        amx::zero<0>();
        amx::zero<1>();
        amx::zero<2>();
        amx::zero<3>();
      }
      for (int kc = 0; kc < kDepth / 32; ++kc) {
        amx::load<4>(a + mt * T * lda + kc * 32, kA);
        amx::load<5>(a + (mt + 1) * T * lda + kc * 32, kA);
        amx::load<6>(b + kc * T * ldb + nt * T, kB);
        amx::load<7>(b + kc * T * ldb + (nt + 1) * T, kB);
        amx::dot_bf16<0, 4, 6>();
        amx::dot_bf16<1, 4, 7>();
        amx::dot_bf16<2, 5, 6>();
        amx::dot_bf16<3, 5, 7>();
      }
      amx::store<0>(c00, kC);
      amx::store<1>(c00 + T, kC);
      amx::store<2>(c00 + T * ldc, kC);
      amx::store<3>(c00 + T * ldc + T, kC);
    }
}

// amx_gemm out of line, per variant (see fma_product).
template <class Cfg, int M, int N, int kDepth>
__attribute__((noinline)) void amx_product(const u16* a, i64 lda, const u32* b, i64 ldb, float* c, i64 ldc,
                                           bool accumulate) {
  amx_gemm<M, N, kDepth>(a, lda, b, ldb, c, ldc, accumulate);
}

// rows x D bf16 rows (stride src_stride) into dst [kRows][D]; rows past `rows` zero.
template <int kRows, int D> EJK_HD void pack_rows_bf16(const u16* src, i64 src_stride, int rows, u16* dst) {
  for (int r = 0; r < kRows; ++r) {
    if (r < rows) __builtin_memcpy(dst + r * D, src + r * src_stride, D * sizeof(u16));
    else for (int d = 0; d < D; ++d) dst[r * D + d] = 0;
  }
}

// dst[t][d] = (src[2t][d], src[2t + 1][d]) for the kRows / 2 pairs of rows of a [kRows][D] block:
// the VNNI form of an operand whose rows are the reduced axis.
template <int kRows, int D> EJK_HD void pack_pairs(const u16* src, u16* dst) {
  for (int t = 0; t < kRows / 2; ++t)
    for (int d0 = 0; d0 < D; d0 += 16) {
      amx::v16u16 lo, hi;
      __builtin_memcpy(&lo, src + 2 * t * D + d0, sizeof lo);
      __builtin_memcpy(&hi, src + (2 * t + 1) * D + d0, sizeof hi);
      const amx::v32u16 pair = amx::interleave_bf16(lo, hi);
      __builtin_memcpy(dst + (t * D + d0) * 2, &pair, sizeof pair);
    }
}

// dst[p][j] = (src[j][2p], src[j][2p + 1]) for the D / 2 pairs of columns of a [kRows][D] block:
// the VNNI form of an operand used transposed (K in S = Q K^T): 16 x 16 transposes of pairs.
template <int kRows, int D> EJK_HD void pack_pairs_transposed(const u16* src, u32* dst) {
  for (int j0 = 0; j0 < kRows; j0 += 16)
    for (int p0 = 0; p0 < D / 2; p0 += 16) {
      amx::v16u r[16];
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) __builtin_memcpy(&r[t], src + (j0 + t) * D + 2 * p0, 64);
      amx::transpose16(r);
#pragma GCC unroll 16
      for (int p = 0; p < 16; ++p) __builtin_memcpy(dst + (p0 + p) * kRows + j0, &r[p], 64);
    }
}

// dst[j][i] = bf16(src[i][j]) of an f32 [kRows][kCols] block: P^T and dX^T, the left operands of
// dV and dK. Query pairs become 32-bit lanes, then 16 x 16 transposes.
template <int kRows, int kCols> EJK_HD void transpose_to_bf16(const float* src, u16* dst) {
  for (int i0 = 0; i0 < kRows; i0 += 32)
    for (int j0 = 0; j0 < kCols; j0 += 16) {
      amx::v16u r[16];
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t)
        r[t] = amx::bf16_pairs(vload(src + (i0 + 2 * t) * kCols + j0), vload(src + (i0 + 2 * t + 1) * kCols + j0));
      amx::transpose16(r);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) __builtin_memcpy(dst + (j0 + k) * kRows + i0, &r[k], 64);
    }
}

// dst = bf16(src) of an f32 [kRows][kCols] block (dX, the left operand of dQ).
template <int kRows, int kCols> EJK_HD void round_to_bf16(const float* src, u16* dst) {
  for (int i = 0; i < kRows * kCols; i += kVecWidth) store_from_f32<ElemKind::bf16>(dst + i, vload(src + i));
}

#endif  // EJK_CPU_AMX

// The bf16 operands of a query tile for the tile products: Q and dO rows (left operands of S and
// dP) and their VNNI pairs of rows (right operands of dK and dV). Empty without AMX.
template <class Cfg, bool = bwd_uses_amx<Cfg>()> struct AmxQueryTile {
  EJK_HD void load(const FlashBwdParams&, const Seq&, i64, i64, int) {}
};
// K^T and V^T as VNNI pairs of head_dim (right operands of S and dP) and K's pairs of rows (the
// right operand of dQ, dq tasks only). Empty without AMX.
template <class Cfg, bool = bwd_uses_amx<Cfg>()> struct AmxKeyTile {
  EJK_HD void load(const FlashBwdParams&, const Seq&, i64, i64, int, bool) {}
};

#if EJK_CPU_AMX
template <class Cfg> struct AmxQueryTile<Cfg, true> {
  static constexpr int BQ = Cfg::block_q, D = Cfg::head_dim;
  alignas(64) u16 q[BQ * D], d_out[BQ * D];
  alignas(64) u16 q_pairs[BQ * D], d_out_pairs[BQ * D];
  EJK_HD void load(const FlashBwdParams& p, const Seq& s, i64 h, i64 first, int rows) {
    const FlashFwdParams& f = p.fwd;
    const u16* qs = static_cast<const u16*>(f.q) + at(s, s.q_row0, first, h, f.q_stride_b, f.q_stride_s, f.q_stride_h);
    const u16* ds =
        static_cast<const u16*>(p.d_out) + at(s, s.q_row0, first, h, p.do_stride_b, p.do_stride_s, p.do_stride_h);
    pack_rows_bf16<BQ, D>(qs, f.q_stride_s, rows, q);
    pack_rows_bf16<BQ, D>(ds, p.do_stride_s, rows, d_out);
    pack_pairs<BQ, D>(q, q_pairs);
    pack_pairs<BQ, D>(d_out, d_out_pairs);
  }
};
template <class Cfg> struct AmxKeyTile<Cfg, true> {
  static constexpr int BK = Cfg::block_k, D = Cfg::head_dim;
  alignas(64) u32 kt[D / 2 * BK], vt[D / 2 * BK];
  alignas(64) u16 k_pairs[BK * D], rows[BK * D];
  EJK_HD void load(const FlashBwdParams& p, const Seq& s, i64 hk, i64 first, int keys, bool with_k_pairs) {
    const FlashFwdParams& f = p.fwd;
    const u16* k = static_cast<const u16*>(f.k) + at(s, s.k_row0, first, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h);
    const u16* v = static_cast<const u16*>(f.v) + at(s, s.k_row0, first, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h);
    pack_rows_bf16<BK, D>(v, f.v_stride_s, keys, rows);
    pack_pairs_transposed<BK, D>(rows, vt);
    pack_rows_bf16<BK, D>(k, f.k_stride_s, keys, rows);
    pack_pairs_transposed<BK, D>(rows, kt);
    if (with_k_pairs) pack_pairs<BK, D>(rows, k_pairs);
  }
};
#endif  // EJK_CPU_AMX

}  // namespace ejk::cpu::bwd
