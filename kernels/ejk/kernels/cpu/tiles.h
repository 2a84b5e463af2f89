// Register-tiled float32 matrix products of the CPU flash kernel, and the packing that feeds
// them. Both products of attention have the shape
//     C[M][N] (+)= A[M][depth] * B[depth][N]
// with B's rows contiguous and A read one scalar at a time (broadcast): the micro-kernel keeps
// an R x NV block of vectors of C in registers and, per step of depth, loads NV vectors of B
// and broadcasts R values of A, so every load feeds R or NV fused multiply-adds.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// a * b + c as one fused instruction whatever -ffp-contract says (the tiles rely on it).
EJK_HD vf vfma(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)0xffff, /*current rounding*/ 4);
#elif defined(__AVX2__) && defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  return a * b + c;  // no FMA unit on baseline x86-64
#endif
}

// A strided view of A: element (row r, depth k) is at a[r * row_stride + k * depth_stride].
struct BroadcastOperand {
  const float* a;
  i64 row_stride, depth_stride;
};

// How C starts: zero, or its current value times a per-row factor (the online softmax's
// rescale of the output accumulator, folded into the tile's load).
struct TileInit {
  bool accumulate;
  const float* row_scale;  // [R] when accumulating
};

// Prefetch is any type with step(): the tiles call it once per step of their depth loop, so a
// caller can spread software prefetches over a product (see BlockPrefetcher in task.h).
struct NoPrefetch {
  EJK_HD void step() {}
};

// C[R][NV*W] = init + sum_k A(r, k) * B[k][NV*W]   (W = kVecWidth)
template <int R, int NV, class Prefetch>
EJK_HD void fma_tile(BroadcastOperand A, const float* b, i64 ldb, int depth, float* c, i64 ldc,
                     TileInit init, Prefetch& prefetch) {
  vf acc[R][NV];
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
    for (int v = 0; v < NV; ++v)
      acc[r][v] = init.accumulate ? vload(c + r * ldc + v * kVecWidth) * init.row_scale[r] : vf{};
  for (int k = 0; k < depth; ++k) {
    prefetch.step();
    const float* bk = b + k * ldb;
    vf bv[NV];
#pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) bv[v] = vload(bk + v * kVecWidth);
    const float* ak = A.a + k * A.depth_stride;
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r) {
      vf ar = splat<vf>(ak[r * A.row_stride]);
#pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[r][v] = vfma(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 32
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) vstore(c + r * ldc + v * kVecWidth, acc[r][v]);
}

// Tile shapes: NV vectors of columns (at most 4: wider tiles gain nothing) and as many rows as
// the register file holds accumulators for, next to NV vectors of B and a broadcast.
inline constexpr int kMaxTileCols = kVecRegisters == 32 ? 4 : 3;
template <int NV> inline constexpr int kTileRows = (kVecRegisters == 32 ? 24 : 9) / NV;

// Rows [0, kRows) of one column chunk of NV vectors, in tiles of kTileRows<NV> rows and one
// remainder tile. row_scale (when accumulating) has kRows entries.
template <int kRows, int NV, class Prefetch>
EJK_HD void fma_column_chunk(BroadcastOperand A, const float* b, i64 ldb, int depth, float* c,
                             i64 ldc, bool accumulate, const float* row_scale,
                             Prefetch& prefetch) {
  constexpr int R = kTileRows<NV>;
  constexpr int kWhole = kRows / R * R;
  for (int r0 = 0; r0 < kWhole; r0 += R) {
    BroadcastOperand Ar{A.a + r0 * A.row_stride, A.row_stride, A.depth_stride};
    fma_tile<R, NV>(Ar, b, ldb, depth, c + r0 * ldc, ldc,
                    {accumulate, accumulate ? row_scale + r0 : nullptr}, prefetch);
  }
  if constexpr (kRows % R != 0) {
    BroadcastOperand Ar{A.a + kWhole * A.row_stride, A.row_stride, A.depth_stride};
    fma_tile<kRows % R, NV>(Ar, b, ldb, depth, c + kWhole * ldc, ldc,
                            {accumulate, accumulate ? row_scale + kWhole : nullptr}, prefetch);
  }
}

// The whole product, kRows rows by kCols vectors of columns. Column chunks are the outer loop:
// a chunk of B (depth x NV vectors) then stays in L1 while all row tiles stream past it.
template <int kRows, int kCols, class Prefetch>
EJK_HD void fma_gemm(BroadcastOperand A, const float* b, i64 ldb, int depth, float* c, i64 ldc,
                     bool accumulate, const float* row_scale, Prefetch& prefetch) {
  constexpr int NV = kCols < kMaxTileCols ? kCols : kMaxTileCols;
  constexpr int kWhole = kCols / NV * NV;
  for (int v0 = 0; v0 < kWhole; v0 += NV)
    fma_column_chunk<kRows, NV>(A, b + v0 * kVecWidth, ldb, depth, c + v0 * kVecWidth, ldc,
                                accumulate, row_scale, prefetch);
  if constexpr (kCols % NV != 0)
    fma_column_chunk<kRows, kCols % NV>(A, b + kWhole * kVecWidth, ldb, depth,
                                        c + kWhole * kVecWidth, ldc, accumulate, row_scale,
                                        prefetch);
}

// ---- packing ----

// rows x n elements (row stride src_stride) into contiguous float rows of dst_stride floats;
// rows [rows, total_rows) become zeros so the tiles never read stale memory.
template <ElemKind K>
EJK_HD void pack_rows(const Elem<K>* src, i64 src_stride, int rows, int total_rows, int n,
                      float* dst, int dst_stride) {
  for (int r = 0; r < rows; ++r) {
    convert_row<K>(src + r * src_stride, dst + r * dst_stride, n);
    for (int i = n; i < dst_stride; ++i) dst[r * dst_stride + i] = 0.0f;
  }
  for (int r = rows; r < total_rows; ++r)
    for (int i = 0; i < dst_stride; ++i) dst[r * dst_stride + i] = 0.0f;
}

// Q block transposed and scaled: dst[d][i] = scale * q[i][d] for i < rows, 0 for the padding
// rows up to kRows. Done once per task, so a plain loop is fine.
template <ElemKind K, int kRows, int kHeadDim>
EJK_HD void pack_q_transposed(const Elem<K>* q, i64 q_stride, int rows, float scale, float* dst) {
  float row[kHeadDim];
  for (int i = 0; i < rows; ++i) {
    convert_row<K>(q + i * q_stride, row, kHeadDim);
    for (int d = 0; d < kHeadDim; ++d) dst[d * kRows + i] = scale * row[d];
  }
  for (int i = rows; i < kRows; ++i)
    for (int d = 0; d < kHeadDim; ++d) dst[d * kRows + i] = 0.0f;
}

}  // namespace ejk::cpu
