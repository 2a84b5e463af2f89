// CUDA grouped matmul, forward and backward (semantics: common/grouped_matmul_params.h).
//
// The general kernel (any strides and extents, f32 included; 16-bit operands that meet the
// preconditions of cuda/grouped_matmul_tc.cuh go there, phases 2 and 3). The (d)lhs pass: a
// block of 128 threads owns a 64 x 64 tile of the output. The tile schedule is computed on the
// device from group_sizes (no host copy, gmm_block_slot): each computed group and the rows
// outside them cut into ceil(rows / 64) tiles, so there are at most ceil(m / 64) + G + 2 slots;
// blocks past the last tile return, blocks over rows of no computed group write zeros (plus
// existing_out). The drhs pass: a block per (group, 64 rows of k, 64 columns of n) sums over
// the group's rows. 16-bit dtypes multiply with mma.sync m16n8k16 (four warps of 32 x 32), f32
// with FMAs in f32; operands go through shared memory 32 sum elements at a time, read with any
// strides (rhs stored transposed included).
#pragma once
#include "ejk/kernels/common/grouped_matmul_params.h"
#include "ejk/kernels/cuda/grouped_matmul_tc.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> __device__ __forceinline__ float gmm_load(const GmmMatrix& a, i64 i, i64 j) {
  const i64 at = i * a.si + j * a.sj;
  if constexpr (E == Elem::f32) {
    return static_cast<const float*>(a.data)[at];
  } else {
    if (a.f32) return static_cast<const float*>(a.data)[at];
    return to_f32<E>(static_cast<const u16*>(a.data)[at]);
  }
}

template <Elem E> __device__ __forceinline__ void gmm_store(void* base, i64 at, bool f32, float v) {
  if constexpr (E == Elem::f32) {
    static_cast<float*>(base)[at] = v;
  } else {
    if (f32) static_cast<float*>(base)[at] = v;
    else static_cast<u16*>(base)[at] = static_cast<u16>(pack2<E>(v, 0.f) & 0xffffu);
  }
}

// The element (i, r) of a kGmmTile x kGmmStep tile of a that load slot idx fetches:
// consecutive slots run along a's unit-stride dim, so a warp's loads coalesce.
__device__ __forceinline__ void gmm_slot(const GmmMatrix& a, int idx, int& i, int& r) {
  if (a.sj == 1) i = idx / kGmmStep, r = idx % kGmmStep;
  else i = idx % kGmmTile, r = idx / kGmmTile;
}

// emit(i, j, sum) for the 64 x 64 tile: sum over r in [r_begin, r_end) of a(i0 + i, r) *
// b(r, j0 + j); rows i >= ni and columns j >= nj read as zeros (emit is still called).
template <Elem E, class Emit>
__device__ void gmm_tile(const GmmMatrix& a, i64 i0, i64 ni, const GmmMatrix& b, i64 r_begin, i64 r_end, i64 j0,
                         i64 nj, Emit&& emit) {
  const int tid = threadIdx.x;
  const GmmMatrix bt{b.data, b.sj, b.si, b.f32};  // b as (j, r): loaded like a
  if constexpr (E == Elem::f32) {
    __shared__ float as[kGmmStep][kGmmTile + 1], bs[kGmmStep][kGmmTile + 1];
    const int ty = tid / 8, tx = tid % 8;  // rows ty * 4 .. + 4, columns tx * 8 .. + 8
    float acc[4][8] = {};
    for (i64 r0 = r_begin; r0 < r_end; r0 += kGmmStep) {
      for (int idx = tid; idx < kGmmTile * kGmmStep; idx += kGmmThreads) {
        int i, r;
        gmm_slot(a, idx, i, r);
        as[r][i] = i < ni && r0 + r < r_end ? gmm_load<E>(a, i0 + i, r0 + r) : 0.f;
        gmm_slot(bt, idx, i, r);
        bs[r][i] = i < nj && r0 + r < r_end ? gmm_load<E>(bt, j0 + i, r0 + r) : 0.f;
      }
      __syncthreads();
      #pragma unroll
      for (int r = 0; r < kGmmStep; ++r) {
        float x[4], y[8];
        #pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = as[r][ty * 4 + u];
        #pragma unroll
        for (int v = 0; v < 8; ++v) y[v] = bs[r][tx * 8 + v];
        #pragma unroll
        for (int u = 0; u < 4; ++u)
          #pragma unroll
          for (int v = 0; v < 8; ++v) acc[u][v] = fmaf(x[u], y[v], acc[u][v]);
      }
      __syncthreads();
    }
    #pragma unroll
    for (int u = 0; u < 4; ++u)
      #pragma unroll
      for (int v = 0; v < 8; ++v) emit(ty * 4 + u, tx * 8 + v, acc[u][v]);
  } else {
    // Rows of a and of b^T, 8 elements of padding so that a row starts 16 bytes on.
    __shared__ __align__(16) u16 as[kGmmTile][kGmmStep + 8], bs[kGmmTile][kGmmStep + 8];
    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    float acc[2][4][4] = {};
    for (i64 r0 = r_begin; r0 < r_end; r0 += kGmmStep) {
      for (int idx = tid; idx < kGmmTile * kGmmStep; idx += kGmmThreads) {
        int i, r;
        gmm_slot(a, idx, i, r);
        const float x = i < ni && r0 + r < r_end ? gmm_load<E>(a, i0 + i, r0 + r) : 0.f;
        as[i][r] = static_cast<u16>(pack2<E>(x, 0.f) & 0xffffu);
        gmm_slot(bt, idx, i, r);
        const float y = i < nj && r0 + r < r_end ? gmm_load<E>(bt, j0 + i, r0 + r) : 0.f;
        bs[i][r] = static_cast<u16>(pack2<E>(y, 0.f) & 0xffffu);
      }
      __syncthreads();
      #pragma unroll
      for (int ks = 0; ks < kGmmStep; ks += 16) {
        u32 fa[2][4];
        #pragma unroll
        for (int mf = 0; mf < 2; ++mf) {
          const int row = wm + mf * 16 + gq, col = ks + 2 * tq;
          fa[mf][0] = *reinterpret_cast<const u32*>(&as[row][col]);
          fa[mf][1] = *reinterpret_cast<const u32*>(&as[row + 8][col]);
          fa[mf][2] = *reinterpret_cast<const u32*>(&as[row][col + 8]);
          fa[mf][3] = *reinterpret_cast<const u32*>(&as[row + 8][col + 8]);
        }
        #pragma unroll
        for (int nf = 0; nf < 4; ++nf) {
          const int n = wn + nf * 8 + gq, col = ks + 2 * tq;
          const u32 b0 = *reinterpret_cast<const u32*>(&bs[n][col]);
          const u32 b1 = *reinterpret_cast<const u32*>(&bs[n][col + 8]);
          #pragma unroll
          for (int mf = 0; mf < 2; ++mf) mma_16816<E>(acc[mf][nf], fa[mf], b0, b1);
        }
      }
      __syncthreads();
    }
    #pragma unroll
    for (int mf = 0; mf < 2; ++mf)
      #pragma unroll
      for (int nf = 0; nf < 4; ++nf)
        #pragma unroll
        for (int h = 0; h < 2; ++h)
          #pragma unroll
          for (int e = 0; e < 2; ++e)
            emit(wm + mf * 16 + gq + h * 8, wn + nf * 8 + 2 * tq + e, acc[mf][nf][h * 2 + e]);
  }
}

// The (d)lhs pass: blockIdx.x a slot, blockIdx.y a tile of output columns.
template <Elem E, bool kBackward> __device__ void gmm_rows_pass(const GroupedMatmulParams& p) {
  __shared__ i64 scan[kGmmThreads + 5];
  const GmmSlot s = gmm_block_slot<kGmmThreads, kGmmTile>(p, blockIdx.x, scan);
  if (s.group == -2) return;
  const i64 j0 = i64(blockIdx.y) * kGmmTile, ncol = gmm_cols(p, kBackward);
  void* out = kBackward ? p.dlhs : p.out;
  const i64 stride = kBackward ? p.dlhs_stride : p.out_stride;
  const bool out_f32 = !kBackward && p.out_f32;
  const GmmMatrix ex{p.existing_out, p.existing_stride, 1, p.existing_f32};
  auto emit = [&](int i, int j, float v) {
    const i64 row = s.lo + i, col = j0 + j;
    if (row >= s.hi || col >= ncol) return;
    if (!kBackward && p.existing_out != nullptr) v += gmm_load<E>(ex, row, col);
    gmm_store<E>(out, row * stride + col, out_f32, v);
  };
  if (s.group == -1) {  // rows of no computed group
    for (int idx = threadIdx.x; idx < kGmmTile * kGmmTile; idx += kGmmThreads) emit(idx / kGmmTile, idx % kGmmTile, 0.f);
    return;
  }
  const i64 bytes = E == Elem::f32 ? 4 : 2;
  gmm_tile<E>(gmm_a(p, kBackward), s.lo, s.hi - s.lo, gmm_b(p, kBackward, s.group, bytes), 0, gmm_inner(p, kBackward),
              j0, ncol - j0, emit);
}

// The drhs pass: blockIdx.x = group * k tiles + k tile, blockIdx.y a tile of n.
template <Elem E> __device__ void gmm_drhs_pass(const GroupedMatmulParams& p) {
  const i64 kt = ceil_div(p.k, (i64)kGmmTile);
  const i64 g = blockIdx.x / kt, i0 = blockIdx.x % kt * kGmmTile, j0 = i64(blockIdx.y) * kGmmTile;
  const TokenSpan span = gmm_group_rows(p, g);
  const GmmMatrix lhs_t{p.lhs, 1, p.lhs_stride, 0};  // (kk, row)
  const GmmMatrix d_out{p.d_out, p.d_out_stride, 1, p.d_out_f32};
  auto emit = [&](int i, int j, float v) {
    if (i0 + i >= p.k || j0 + j >= p.n) return;
    gmm_store<E>(p.drhs, g * p.drhs_g + (i0 + i) * p.drhs_k + (j0 + j) * p.drhs_n, false, v);
  };
  gmm_tile<E>(lhs_t, i0, p.k - i0, d_out, span.begin, span.end, j0, p.n - j0, emit);
}

// Phases 0 and 1 run here, 2 and 3 on the pipelined kernel (16-bit dtypes only).
template <class Cfg> __device__ void gmm_fwd(const GroupedMatmulParams& p) {
  if constexpr (Cfg::E != Elem::f32)
    if (p.phase >= 2) return gmm_tc<Cfg::E, false>(p);
  gmm_rows_pass<Cfg::E, false>(p);
}

template <class Cfg> __device__ void gmm_bwd(const GroupedMatmulParams& p) {
  if constexpr (Cfg::E != Elem::f32)
    if (p.phase >= 2) return gmm_tc<Cfg::E, true>(p);
  if (p.phase == 0) gmm_rows_pass<Cfg::E, true>(p);
  else gmm_drhs_pass<Cfg::E>(p);
}

}  // namespace ejk::cuda
