// CUDA grouped matmul on the tensor cores, pipelined (semantics: common/grouped_matmul_params.h;
// the general kernel and the dispatch: cuda/grouped_matmul.cuh).
//
// A block of 8 warps owns a 128 x 128 output tile (a warp 64 x 32: 4 x 4 mma.sync m16n8k16
// fragments, f32 sums) or, with tc_wide, 128 x 256 (warps of 64 x 64, a third fewer
// shared-memory reads per product). The sum runs 32 elements at a time through kGmmTcStages
// shared-memory stages filled by cp.async 16-byte copies, so kGmmTcStages - 1 loads are in
// flight while the warps multiply; one __syncthreads per step. An operand is X(q, r) (q: output
// rows or columns, r: summed) stored contiguous along r ([q][32 + 8] in shared memory, read by
// ldmatrix) or along q ([32][q + 8], read by ldmatrix.trans), so lhs, rhs, rhs stored
// transposed, d_out and lhs^T are all read in place. Preconditions (the host checks them):
// 16-bit operands, their contiguous dims and row strides multiples of 8 elements, 16-byte
// aligned bases. Rows (of a group, of m) are masked one by one, so group boundaries need no
// alignment. Design: docs/design/grouped_matmul.md.
#pragma once
#include "ejk/kernels/common/grouped_matmul_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// Inclusive prefix sum over the block of one value per thread (Hillis-Steele in buf, kThreads
// entries of shared memory); total gets the block's sum. Every thread calls it.
template <int kThreads> __device__ i64 gmm_block_scan(i64 v, i64* buf, i64& total) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int d = 1; d < kThreads; d *= 2) {
    const i64 x = t >= d ? buf[t - d] : 0;
    __syncthreads();
    buf[t] += x;
    __syncthreads();
  }
  const i64 r = buf[t];
  total = buf[kThreads - 1];
  __syncthreads();
  return r;
}

// The rows [lo, hi) of a (d)lhs-pass slot and its computed group (-1: rows of no computed group,
// -2: no tile). Slots take the computed groups' tiles of kRows rows in order, then the rows
// before the first computed group, then the rows past the last. Read from the device's
// group_sizes by the whole block, kThreads sizes per scan. buf: kThreads + 5 i64 of shared memory.
struct GmmSlot {
  i64 group, lo, hi;
};

template <int kThreads, int kRows> __device__ GmmSlot gmm_block_slot(const GroupedMatmulParams& p, i64 slot, i64* buf) {
  const i64 offset = gmm_offset(p), limit = offset + p.groups;
  i64* found = buf + kThreads;  // group, lo, hi of the slot; then the ends of groups offset - 1 and limit - 1
  if (threadIdx.x == 0) found[0] = -2, found[3] = found[4] = 0;
  __syncthreads();
  i64 rows = 0, tiles = 0;  // the sums over earlier scans (the same in every thread)
  for (i64 base = 0; base < limit; base += kThreads) {
    const i64 e = base + threadIdx.x, size = e < limit ? gmm_size(p, e) : 0;
    i64 rows_total, tiles_total;
    const i64 upto = rows + gmm_block_scan<kThreads>(size, buf, rows_total);
    const i64 start = min_of(upto - size, p.m), end = min_of(upto, p.m);
    const i64 t = e >= offset && e < limit ? ceil_div(end - start, (i64)kRows) : 0;
    const i64 first = tiles + gmm_block_scan<kThreads>(t, buf, tiles_total) - t;
    if (slot >= first && slot < first + t) {
      const i64 lo = start + (slot - first) * kRows;
      found[0] = e - offset, found[1] = lo, found[2] = min_of(lo + kRows, end);
    }
    if (e == offset - 1) found[3] = end;
    if (e == limit - 1) found[4] = end;
    rows += rows_total, tiles += tiles_total;
  }
  __syncthreads();
  const GmmSlot s{found[0], found[1], found[2]};
  const i64 before = found[3], after = found[4];
  __syncthreads();  // buf is the caller's again
  if (s.group != -2) return s;
  i64 r = slot - tiles;
  const i64 pre = ceil_div(before, (i64)kRows);
  if (r < pre) return {-1, r * kRows, min_of((r + 1) * kRows, before)};
  r -= pre;
  if (r < ceil_div(p.m - after, (i64)kRows)) return {-1, after + r * kRows, min_of(after + (r + 1) * kRows, p.m)};
  return {-2, 0, 0};
}

// The block's sum of one value per thread: warp shuffles, then the warps' sums through buf
// (kThreads / 32 i64 of shared memory). Every thread calls it and gets the sum.
template <int kThreads> __device__ i64 gmm_block_sum(i64 v, i64* buf) {
  long long x = v;
  #pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) buf[threadIdx.x / 32] = x;
  __syncthreads();
  i64 total = 0;
  #pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += buf[w];
  __syncthreads();
  return total;
}

// Rows of computed group g, the sizes before it summed by the whole block (buf: kThreads i64).
template <int kThreads> __device__ TokenSpan gmm_block_group_rows(const GroupedMatmulParams& p, i64 g, i64* buf) {
  const i64 first = gmm_offset(p) + g;
  i64 rows = 0;
  for (i64 base = 0; base < first; base += kThreads) {
    const i64 e = base + threadIdx.x;
    rows += gmm_block_sum<kThreads>(e < first ? gmm_size(p, e) : 0, buf);
  }
  const i64 start = min_of(rows, p.m);
  return {start, min_of(start + gmm_size(p, first), p.m)};
}

constexpr int kTcPitchR = kGmmTcStep + 8;  // u16 elements a row of an r-contiguous stage

// cp.async copies of x(q0 + q, r0 + r), q < kQ, r < 32, into one operand stage; q >= nq or
// r0 + r >= r_end zero-filled. Along the contiguous dim the 8-element chunks are whole or out
// (that dim's extent is a multiple of 8).
template <int kQ, bool kQMajor>
__device__ __forceinline__ void tc_load(u16* st, const GmmMatrix& x, i64 q0, i64 nq, i64 r0, i64 r_end) {
  const u16* g = static_cast<const u16*>(x.data);
  constexpr int kChunks = kQ * kGmmTcStep / 8;
  static_assert(kChunks % kGmmTcThreads == 0, "every thread copies as many chunks");
  #pragma unroll
  for (int c = threadIdx.x; c < kChunks; c += kGmmTcThreads) {
    const int q = kQMajor ? (c % (kQ / 8)) * 8 : c / (kGmmTcStep / 8);
    const int r = kQMajor ? c / (kQ / 8) : (c % (kGmmTcStep / 8)) * 8;
    const bool valid = q < nq && r0 + r < r_end;
    u16* dst = kQMajor ? st + r * (kQ + 8) + q : st + q * kTcPitchR + r;
    cp_async_16(smem_addr(dst), valid ? g + (q0 + q) * x.si + (r0 + r) * x.sj : g, valid);
  }
}

// The warp's 64 x kWN products over one stage: A rows wm.., B columns wn.. of a kBN-column B
// (ldmatrix layouts as the mma.sync m16n8k16 fragments want them: a0..a3 = rows 0-7 / 8-15 x
// sums 0-7 / 8-15; b0, b1 = sums 0-7 / 8-15 of 8 columns).
template <Elem E, bool kAq, bool kBq, int kWN>
__device__ __forceinline__ void tc_mma_stage(const u16* as, const u16* bs, float (&acc)[4][kWN / 8][4], int wm, int wn) {
  constexpr int kBN = 4 * kWN, kNF = kWN / 8;
  constexpr int kPitchA = kGmmTcTile + 8, kPitchB = kBN + 8;  // q-contiguous stages
  const int lane = threadIdx.x % 32, l8 = lane % 8, h1 = (lane / 8) % 2, h2 = lane / 16;
  #pragma unroll
  for (int ks = 0; ks < kGmmTcStep; ks += 16) {
    u32 fa[4][4], fb[kNF][2];
    #pragma unroll
    for (int mf = 0; mf < 4; ++mf) {
      if constexpr (kAq) ldmatrix_x4_trans(fa[mf], smem_addr(as + (ks + h2 * 8 + l8) * kPitchA + wm + mf * 16 + h1 * 8));
      else ldmatrix_x4(fa[mf], smem_addr(as + (wm + mf * 16 + lane % 16) * kTcPitchR + ks + h2 * 8));
    }
    #pragma unroll
    for (int np = 0; np < kNF / 2; ++np) {
      u32 r[4];
      if constexpr (kBq) ldmatrix_x4_trans(r, smem_addr(bs + (ks + h1 * 8 + l8) * kPitchB + wn + np * 16 + h2 * 8));
      else ldmatrix_x4(r, smem_addr(bs + (wn + np * 16 + h2 * 8 + l8) * kTcPitchR + ks + h1 * 8));
      fb[2 * np][0] = r[0], fb[2 * np][1] = r[1], fb[2 * np + 1][0] = r[2], fb[2 * np + 1][1] = r[3];
    }
    #pragma unroll
    for (int mf = 0; mf < 4; ++mf)
      #pragma unroll
      for (int nf = 0; nf < kNF; ++nf) mma_16816<E>(acc[mf][nf], fa[mf], fb[nf][0], fb[nf][1]);
  }
}

// emit(i, j, s_ij, s_ij+1) for the 128 x 4 kWN tile, j even: s = sum over r in [r_begin, r_end)
// of a(i0 + i, r) * bt(j0 + j, r); rows i >= ni and columns j >= nj read as zeros. Warps 2 x 4.
template <Elem E, bool kAq, bool kBq, int kWN, class Emit>
__device__ void tc_tile(const GmmMatrix& a, i64 i0, i64 ni, const GmmMatrix& bt, i64 j0, i64 nj, i64 r_begin, i64 r_end,
                        u16* smem, Emit&& emit) {
  constexpr int kBN = 4 * kWN, kNF = kWN / 8;
  constexpr int kA = gmm_tc_operand(kGmmTcTile), kStage = kA + gmm_tc_operand(kBN);
  static_assert(kStage * kGmmTcStages * 2 == gmm_tc_smem_bytes(kBN == 256), "the host's shared memory size");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * kWN;
  float acc[4][kNF][4] = {};
  const i64 steps = ceil_div(r_end - r_begin, (i64)kGmmTcStep);
  auto load = [&](i64 t) {  // step t into stage t % kGmmTcStages; an empty group past the end
    if (t < steps) {
      u16* st = smem + (t % kGmmTcStages) * kStage;
      const i64 r0 = r_begin + t * kGmmTcStep;
      tc_load<kGmmTcTile, kAq>(st, a, i0, ni, r0, r_end);
      tc_load<kBN, kBq>(st + kA, bt, j0, nj, r0, r_end);
    }
    cp_async_commit();
  };
  #pragma unroll
  for (int s = 0; s < kGmmTcStages - 1; ++s) load(s);
  for (i64 t = 0; t < steps; ++t) {
    cp_async_wait<kGmmTcStages - 2>();  // step t landed (this thread's copies) ...
    __syncthreads();  // ... everyone's, and step t - 1's stage is no longer read
    load(t + kGmmTcStages - 1);
    const u16* st = smem + (t % kGmmTcStages) * kStage;
    tc_mma_stage<E, kAq, kBq, kWN>(st, st + kA, acc, wm, wn);
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free for the caller
  #pragma unroll
  for (int mf = 0; mf < 4; ++mf)
    #pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
      #pragma unroll
      for (int h = 0; h < 2; ++h)
        emit(wm + mf * 16 + lane / 4 + h * 8, wn + nf * 8 + 2 * (lane % 4), acc[mf][nf][2 * h], acc[mf][nf][2 * h + 1]);
}

template <Elem E> __device__ __forceinline__ float tc_in(const void* base, i64 at, bool f32) {
  return f32 ? static_cast<const float*>(base)[at] : to_f32<E>(static_cast<const u16*>(base)[at]);
}

// Two adjacent outputs (at, at + 1), in f32 or the dtype; one store where pairs are aligned.
template <Elem E> __device__ __forceinline__ void tc_store2(void* base, i64 at, bool f32, bool pairs, float v0, float v1) {
  if (f32) {
    float* o = static_cast<float*>(base) + at;
    if (pairs) *reinterpret_cast<float2*>(o) = float2{v0, v1};
    else o[0] = v0, o[1] = v1;
  } else {
    u16* o = static_cast<u16*>(base) + at;
    const u32 two = pack2<E>(v0, v1);
    if (pairs) *reinterpret_cast<u32*>(o) = two;
    else o[0] = u16(two & 0xffffu), o[1] = u16(two >> 16);
  }
}

// The (d)lhs pass: blockIdx.x = slot * column tiles + column tile (a slot's column tiles
// adjacent, so its rows of A are read from DRAM once).
template <Elem E, bool kBackward, int kWN> __device__ void tc_rows_pass(const GroupedMatmulParams& p, u16* smem) {
  constexpr int kBN = 4 * kWN;
  const i64 ncol = gmm_cols(p, kBackward), col_tiles = ceil_div(ncol, (i64)kBN);
  const i64 j0 = i64(blockIdx.x) % col_tiles * kBN;
  const GmmSlot s = gmm_block_slot<kGmmTcThreads, kGmmTcTile>(p, i64(blockIdx.x) / col_tiles, reinterpret_cast<i64*>(smem));
  if (s.group == -2) return;
  void* out = kBackward ? p.dlhs : p.out;
  const i64 stride = kBackward ? p.dlhs_stride : p.out_stride;
  const bool out_f32 = !kBackward && p.out_f32;
  // Even columns: a pair is aligned where the base is and rows are an even number apart.
  const bool pairs = reinterpret_cast<unsigned long long>(out) % (out_f32 ? 8 : 4) == 0 && stride % 2 == 0;
  auto emit = [&](int i, int j, float v0, float v1) {
    const i64 row = s.lo + i, col = j0 + j;
    if (row >= s.hi || col >= ncol) return;
    if (!kBackward && p.existing_out != nullptr) {
      const i64 at = row * p.existing_stride + col;
      v0 += tc_in<E>(p.existing_out, at, p.existing_f32), v1 += tc_in<E>(p.existing_out, at + 1, p.existing_f32);
    }
    tc_store2<E>(out, row * stride + col, out_f32, pairs, v0, v1);
  };
  if (s.group == -1) {  // rows of no computed group
    for (int idx = threadIdx.x; idx < kGmmTcTile * kBN / 2; idx += kGmmTcThreads)
      emit(idx / (kBN / 2), idx % (kBN / 2) * 2, 0.f, 0.f);
    return;
  }
  const GmmMatrix a = gmm_a(p, kBackward), b = gmm_b(p, kBackward, s.group, 2);
  const GmmMatrix bt{b.data, b.sj, b.si, b.f32};  // (column, summed)
  const i64 inner = gmm_inner(p, kBackward);
  if (bt.si == 1) tc_tile<E, false, true, kWN>(a, s.lo, s.hi - s.lo, bt, j0, ncol - j0, 0, inner, smem, emit);
  else tc_tile<E, false, false, kWN>(a, s.lo, s.hi - s.lo, bt, j0, ncol - j0, 0, inner, smem, emit);
}

// The drhs pass: blockIdx.x = (group * k tiles + k tile) * n tiles + n tile; drhs[g] = lhs_g^T
// d_out_g, both read along their rows (q-major: k, resp. n contiguous).
template <Elem E, int kWN> __device__ void tc_drhs_pass(const GroupedMatmulParams& p, u16* smem) {
  constexpr int kBN = 4 * kWN;
  const i64 kt = ceil_div(p.k, (i64)kGmmTcTile), nt = ceil_div(p.n, (i64)kBN);
  const i64 x = blockIdx.x, g = x / (kt * nt), i0 = x / nt % kt * kGmmTcTile, j0 = x % nt * kBN;
  const TokenSpan span = gmm_block_group_rows<kGmmTcThreads>(p, g, reinterpret_cast<i64*>(smem));
  const GmmMatrix lhs_t{p.lhs, 1, p.lhs_stride, 0};    // (kk, row)
  const GmmMatrix d_out_t{p.d_out, 1, p.d_out_stride, 0};  // (nn, row)
  u16* drhs = static_cast<u16*>(p.drhs) + g * p.drhs_g;
  auto emit = [&](int i, int j, float v0, float v1) {
    const i64 kk = i0 + i, nn = j0 + j;
    if (kk >= p.k || nn >= p.n) return;
    const u32 two = pack2<E>(v0, v1);
    drhs[kk * p.drhs_k + nn * p.drhs_n] = u16(two & 0xffffu);
    drhs[kk * p.drhs_k + (nn + 1) * p.drhs_n] = u16(two >> 16);
  };
  tc_tile<E, true, true, kWN>(lhs_t, i0, p.k - i0, d_out_t, j0, p.n - j0, span.begin, span.end, smem, emit);
}

// Phase 4, before the pipelined backward of an f32 d_out: d_out rounded to the dtype (as the
// general kernel rounds it on load) into d_out_copy, 8 elements a thread.
template <Elem E> __device__ void tc_round_d_out(const GroupedMatmulParams& p) {
  const i64 chunk = i64(blockIdx.x) * kGmmTcThreads + threadIdx.x, per_row = p.n / 8;
  if (chunk >= p.m * per_row) return;
  const i64 row = chunk / per_row, col = chunk % per_row * 8;
  const float* src = static_cast<const float*>(p.d_out) + row * p.d_out_stride + col;
  u32* dst = reinterpret_cast<u32*>(static_cast<u16*>(p.d_out_copy) + row * p.n + col);
  #pragma unroll
  for (int e = 0; e < 4; ++e) dst[e] = pack2<E>(src[2 * e], src[2 * e + 1]);
}

// The entry of the pipelined passes: phase 2 the (d)lhs pass, 3 drhs; tc_wide the tile width.
template <Elem E, bool kBackward, int kWN> __device__ void gmm_tc_tiles(const GroupedMatmulParams& p, u16* smem) {
  if (p.phase == 2) tc_rows_pass<E, kBackward, kWN>(p, smem);
  else if constexpr (kBackward) tc_drhs_pass<E, kWN>(p, smem);
}

template <Elem E, bool kBackward> __device__ void gmm_tc(const GroupedMatmulParams& p) {
  if (kBackward && p.phase == 4) return tc_round_d_out<E>(p);
  extern __shared__ __align__(16) unsigned char gmm_smem[];
  u16* smem = reinterpret_cast<u16*>(gmm_smem);
  if (p.tc_wide) gmm_tc_tiles<E, kBackward, 64>(p, smem);
  else gmm_tc_tiles<E, kBackward, 32>(p, smem);
}

}  // namespace ejk::cuda
