// CPU grouped matmul, forward and backward (semantics: common/grouped_matmul_params.h).
//
// The (d)lhs pass: one task is (tile of kGmmRows rows of [0, m), tile of kGmmCols output
// columns); the tile's f32 sums stay on the worker's stack while the groups that meet its rows
// add their products, so a group boundary inside a tile costs nothing extra and rows of no
// computed group keep 0. The drhs pass (backward): one task is (group, tile of kGmmRows of k,
// tile of kGmmCols of n), summing over the group's rows. Operands are packed to f32 panels of
// kGmmInner along the sum, whatever their strides (rhs stored transposed included); the inner
// product runs 4 rows x 32 columns of vector accumulators.
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/grouped_matmul_params.h"
#include "ejk/kernels/cpu/types.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

inline constexpr int kGmmRows = kGmmCpuRows, kGmmCols = kGmmCpuCols, kGmmInner = 128;
inline constexpr int kGmmHalf = 32;  // columns of one accumulator block

template <ElemKind K> EJK_HD float gmm_read(const GmmMatrix& a, i64 i, i64 j) {
  const i64 at = i * a.si + j * a.sj;
  return a.f32 ? static_cast<const float*>(a.data)[at] : to_f32<K>(static_cast<const Elem<K>*>(a.data)[at]);
}

// dst[0, n) = n consecutive elements of a from offset `at`, vectorized.
template <ElemKind K> EJK_HD void gmm_copy_run(const GmmMatrix& a, i64 at, int n, float* dst) {
  if (a.f32) convert_row<ElemKind::f32>(static_cast<const float*>(a.data) + at, dst, n);
  else convert_row<K>(static_cast<const Elem<K>*>(a.data) + at, dst, n);
}

// dst[i * kGmmInner + r] = a(i0 + i, r0 + r) for i < ni, r < nr: whole runs where a's rows are
// contiguous, else element by element along a's unit-stride dim.
template <ElemKind K> EJK_HD void gmm_pack_a(const GmmMatrix& a, i64 i0, int ni, i64 r0, int nr, float* dst) {
  if (a.sj == 1) {
    for (int i = 0; i < ni; ++i) gmm_copy_run<K>(a, (i0 + i) * a.si + r0, nr, dst + i * kGmmInner);
    return;
  }
  for (int r = 0; r < nr; ++r)
    for (int i = 0; i < ni; ++i) dst[i * kGmmInner + r] = gmm_read<K>(a, i0 + i, r0 + r);
}

// dst[r * kGmmCols + j] = b(r0 + r, j0 + j) for j < nj, 0 for nj <= j < kGmmCols; runs as
// gmm_pack_a's.
template <ElemKind K> EJK_HD void gmm_pack_b(const GmmMatrix& b, i64 r0, int nr, i64 j0, int nj, float* dst) {
  for (int r = 0; r < nr; ++r)
    for (int j = nj; j < kGmmCols; ++j) dst[r * kGmmCols + j] = 0;
  if (b.sj == 1) {
    for (int r = 0; r < nr; ++r) gmm_copy_run<K>(b, (r0 + r) * b.si + j0, nj, dst + r * kGmmCols);
    return;
  }
  for (int j = 0; j < nj; ++j)
    for (int r = 0; r < nr; ++r) dst[r * kGmmCols + j] = gmm_read<K>(b, r0 + r, j0 + j);
}

// acc[i][0, kGmmCols) += sum_r ap[i][r] * bp[r][.] for kR rows, nr terms.
template <int kR> EJK_HD void gmm_rows(const float* ap, const float* bp, int nr, float* acc) {
  constexpr int kV = kGmmHalf / kVecWidth;
  for (int half = 0; half < kGmmCols; half += kGmmHalf) {
    vf c[kR][kV];
    for (int i = 0; i < kR; ++i)
      for (int v = 0; v < kV; ++v) c[i][v] = vload(acc + i * kGmmCols + half + v * kVecWidth);
    for (int r = 0; r < nr; ++r) {
      vf b[kV];
      for (int v = 0; v < kV; ++v) b[v] = vload(bp + r * kGmmCols + half + v * kVecWidth);
      for (int i = 0; i < kR; ++i) {
        const vf a = splat<vf>(ap[i * kGmmInner + r]);
        for (int v = 0; v < kV; ++v) c[i][v] += a * b[v];
      }
    }
    for (int i = 0; i < kR; ++i)
      for (int v = 0; v < kV; ++v) vstore(acc + i * kGmmCols + half + v * kVecWidth, c[i][v]);
  }
}

// acc[rows][kGmmCols] += a(i0 + i, r) b(r, j0 + j) over r in [r_begin, r_end), panel by panel.
template <ElemKind K>
EJK_HD void gmm_block(const GmmMatrix& a, i64 i0, int rows, const GmmMatrix& b, i64 r_begin, i64 r_end,
                      i64 j0, int cols, float* acc) {
  float ap[kGmmRows * kGmmInner];
  float bp[kGmmInner * kGmmCols];
  for (i64 r0 = r_begin; r0 < r_end; r0 += kGmmInner) {
    const int nr = (int)min_of((i64)kGmmInner, r_end - r0);
    gmm_pack_a<K>(a, i0, rows, r0, nr, ap);
    gmm_pack_b<K>(b, r0, nr, j0, cols, bp);
    int i = 0;
    for (; i + 4 <= rows; i += 4) gmm_rows<4>(ap + i * kGmmInner, bp, nr, acc + i * kGmmCols);
    for (; i < rows; ++i) gmm_rows<1>(ap + i * kGmmInner, bp, nr, acc + i * kGmmCols);
  }
}

template <ElemKind K> EJK_HD void gmm_store(void* base, i64 at, bool f32, float v) {
  if (f32) static_cast<float*>(base)[at] = v;
  else static_cast<Elem<K>*>(base)[at] = from_f32<K>(v);
}

// One (d)lhs task: rows [i0, i0 + kGmmRows) x output columns [j0, j0 + kGmmCols).
// On the variant's Cfg, not its values: a Cfg of the variant's own gives this and its lambda
// internal linkage, so targets built with other -march flags never share their code.
template <class Cfg> EJK_HD void gmm_rows_task(const GroupedMatmulParams& p, i64 rt, i64 ct) {
  constexpr ElemKind K = Cfg::kElem;
  constexpr bool kBackward = Cfg::kBackward;
  const i64 i0 = rt * kGmmRows, j0 = ct * kGmmCols, ncol = gmm_cols(p, kBackward);
  const int rows = (int)min_of((i64)kGmmRows, p.m - i0), cols = (int)min_of((i64)kGmmCols, ncol - j0);
  float acc[kGmmRows * kGmmCols];
  for (int i = 0; i < kGmmRows * kGmmCols; ++i) acc[i] = 0;
  const GmmMatrix a = gmm_a(p, kBackward);
  const i64 bytes = (i64)sizeof(Elem<K>);
  gmm_groups_in(p, i0, i0 + rows, [&](i64 g, i64 lo, i64 hi) {
    const GmmMatrix b = gmm_b(p, kBackward, g, bytes);
    gmm_block<K>(a, lo, (int)(hi - lo), b, 0, gmm_inner(p, kBackward), j0, cols, acc + (lo - i0) * kGmmCols);
  });
  void* out = kBackward ? p.dlhs : p.out;
  const i64 stride = kBackward ? p.dlhs_stride : p.out_stride;
  const bool f32 = !kBackward && p.out_f32;
  const GmmMatrix ex{p.existing_out, p.existing_stride, 1, p.existing_f32};
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      float v = acc[i * kGmmCols + j];
      if (!kBackward && p.existing_out != nullptr) v += gmm_read<K>(ex, i0 + i, j0 + j);
      gmm_store<K>(out, (i0 + i) * stride + j0 + j, f32, v);
    }
}

// One drhs task: group g, k rows [i0, i0 + kGmmRows) x n columns [j0, j0 + kGmmCols).
template <class Cfg> EJK_HD void gmm_drhs_task(const GroupedMatmulParams& p, i64 t) {
  constexpr ElemKind K = Cfg::kElem;
  const i64 kt = ceil_div(p.k, (i64)kGmmRows), nt = ceil_div(p.n, (i64)kGmmCols);
  const i64 g = t / (kt * nt), i0 = t / nt % kt * kGmmRows, j0 = t % nt * kGmmCols;
  const int rows = (int)min_of((i64)kGmmRows, p.k - i0), cols = (int)min_of((i64)kGmmCols, p.n - j0);
  float acc[kGmmRows * kGmmCols];
  for (int i = 0; i < kGmmRows * kGmmCols; ++i) acc[i] = 0;
  const TokenSpan span = gmm_group_rows(p, g);
  const GmmMatrix lhs_t{p.lhs, 1, p.lhs_stride, 0};  // (kk, row)
  const GmmMatrix d_out{p.d_out, p.d_out_stride, 1, p.d_out_f32};
  if (span.begin < span.end) gmm_block<K>(lhs_t, i0, rows, d_out, span.begin, span.end, j0, cols, acc);
  const i64 base = g * p.drhs_g;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      gmm_store<K>(p.drhs, base + (i0 + i) * p.drhs_k + (j0 + j) * p.drhs_n, false, acc[i * kGmmCols + j]);
}

// Cfg: kElem, kBackward. Tasks: row_tiles * col_tiles (d)lhs tasks (none in the backward
// without dlhs), then the backward's drhs_tiles.
template <class Cfg> void gmm_tasks(const GroupedMatmulParams& p, long long task_begin, long long task_end) {
  const i64 lhs_tasks = p.row_tiles * p.col_tiles;
  for (long long t = task_begin; t < task_end; ++t) {
    if (t < lhs_tasks) gmm_rows_task<Cfg>(p, t / p.col_tiles, t % p.col_tiles);
    else gmm_drhs_task<Cfg>(p, t - lhs_tasks);
  }
}

}  // namespace ejk::cpu
