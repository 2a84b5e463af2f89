// CUDA forward of NSA's selection attention (the math: common/nsa_params.h) on tensor cores,
// as flash-linear-attention's NSA kernel arranges it: one warp per (sequence, token, kv head,
// up to 16 query heads of the group). The group's query heads are the 16 rows of one mma.sync
// m16n8k16 tile (missing heads are zero rows), so the token's blocks are loaded once for all of
// them; each selected block is walked in tiles of 64 keys: S = Q K^T and O += P V on tensor
// cores, an online softmax in f32 between them, P kept in registers as the A operand of P V.
// Fragments are read from shared memory by the PTX ISA's m16n8k16 layouts directly.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/nsa_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// K and V rows [k0, k0 + n) of sequence b, kv head hk into [kNsaKeyTile][D] tiles, zero rows
// past n; threads first, first + step, ... share the elements.
template <int D>
__device__ __forceinline__ void nsa_load_kv(const NsaParams& p, i64 b, i64 hk, i64 k0, int n, u16 (*ks)[D],
                                            u16 (*vs)[D], int first, int step) {
  const u16* k = static_cast<const u16*>(p.k);
  const u16* v = static_cast<const u16*>(p.v);
  for (int i = first; i < int(kNsaKeyTile) * D; i += step) {
    const int j = i / D, d = i % D;
    const bool in = j < n;
    ks[j][d] = in ? k[b * p.k_stride_b + (k0 + j) * p.k_stride_t + hk * p.k_stride_h + d] : u16(0);
    vs[j][d] = in ? v[b * p.v_stride_b + (k0 + j) * p.v_stride_t + hk * p.v_stride_h + d] : u16(0);
  }
}

template <Elem E, int D> __device__ __forceinline__ void nsa_fwd(const NsaParams& p) {
  static_assert(E != Elem::f32, "the tensor-core kernel takes 16-bit elements");
  static_assert(D % 16 == 0, "head_dim must be a multiple of 16");
  constexpr int BK = int(kNsaKeyTile), NT = BK / 8, KS = D / 16, DT = D / 8;
  extern __shared__ __align__(16) unsigned char nsa_smem[];
  u16(*qs)[D] = reinterpret_cast<u16(*)[D]>(nsa_smem);
  u16(*ks)[D] = qs + 16;
  u16(*vs)[D] = ks + BK;
  const int lane = int(threadIdx.x) % 32, g = lane / 4, q2 = (lane % 4) * 2;

  // The task: sequence b, token t, kv head hk, query heads [h0, h0 + rows).
  const NsaRowTask task = nsa_row_task(p, i64(blockIdx.x));
  const i64 b = task.b, t = task.t, hk = task.hk, h0 = task.h0;
  const int rows = task.rows;

  const u16* q = static_cast<const u16*>(p.q);
  for (int i = lane; i < 16 * D; i += 32) {
    const int r = i / D, c = i % D;
    qs[r][c] = r < rows ? q[b * p.q_stride_b + t * p.q_stride_t + (h0 + r) * p.q_stride_h + c] : u16(0);
  }
  __syncthreads();
  auto pair = [](const u16* row, int c) { return u32(row[c]) | (u32(row[c + 1]) << 16); };
  u32 qa[KS][4];
  for (int kk = 0; kk < KS; ++kk) {
    qa[kk][0] = pair(qs[g], kk * 16 + q2), qa[kk][1] = pair(qs[g + 8], kk * 16 + q2);
    qa[kk][2] = pair(qs[g], kk * 16 + 8 + q2), qa[kk][3] = pair(qs[g + 8], kk * 16 + 8 + q2);
  }
  float o[DT][4];
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {neg_inf_f32(), neg_inf_f32()}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

  nsa_for_each_tile(p, task, [&](i64 k0, int n) {
    __syncthreads();  // the previous tile is read by every lane
    nsa_load_kv<D>(p, b, hk, k0, n, ks, vs, lane, 32);
    __syncthreads();
    // S = Q K^T: B[k][n] = K[n][k], n the tile's key.
    float sc[NT][4];
    for (int nt = 0; nt < NT; ++nt) {
      sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
      for (int kk = 0; kk < KS; ++kk)
        mma_16816<E>(sc[nt], qa[kk], pair(ks[nt * 8 + g], kk * 16 + q2), pair(ks[nt * 8 + g], kk * 16 + 8 + q2));
    }
    float mx[2] = {m[0], m[1]};
    for (int nt = 0; nt < NT; ++nt)
      for (int e = 0; e < 4; ++e) {
        const int j = nt * 8 + q2 + (e & 1);
        sc[nt][e] = j < n ? sc[nt][e] * p.scale : neg_inf_f32();
        mx[e / 2] = max_of(mx[e / 2], sc[nt][e]);
      }
    // A row's 64 logits lie in the 4 lanes of its quad.
    float corr[2], sum[2] = {0.0f, 0.0f};
    for (int h = 0; h < 2; ++h) {
      mx[h] = max_of(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = max_of(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      corr[h] = expf(m[h] - mx[h]);
      m[h] = mx[h];
    }
    for (int nt = 0; nt < NT; ++nt)
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = expf(sc[nt][e] - m[e / 2]);
        sum[e / 2] += sc[nt][e];
      }
    for (int h = 0; h < 2; ++h) {
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
      l[h] = l[h] * corr[h] + sum[h];
    }
    for (int dt = 0; dt < DT; ++dt)
      o[dt][0] *= corr[0], o[dt][1] *= corr[0], o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    // O += P V: P's accumulator layout is the A layout of keys [16 kk, 16 kk + 16).
    for (int kk = 0; kk < BK / 16; ++kk) {
      const u32 pa[4] = {pack2<E>(sc[2 * kk][0], sc[2 * kk][1]), pack2<E>(sc[2 * kk][2], sc[2 * kk][3]),
                         pack2<E>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                         pack2<E>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
      const int key = kk * 16 + q2;
      for (int dt = 0; dt < DT; ++dt) {
        const int col = dt * 8 + g;
        const u32 b0 = u32(vs[key][col]) | (u32(vs[key + 1][col]) << 16);
        const u32 b1 = u32(vs[key + 8][col]) | (u32(vs[key + 9][col]) << 16);
        mma_16816<E>(o[dt], pa, b0, b1);
      }
    }
  });
  u16* out = static_cast<u16*>(p.out);
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (r >= rows) continue;
    const i64 head = h0 + r;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    u16* dst = out + b * p.o_stride_b + t * p.o_stride_t + head * p.o_stride_h;
    for (int dt = 0; dt < DT; ++dt) {
      const u32 two = pack2<E>(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      dst[dt * 8 + q2] = u16(two & 0xffffu), dst[dt * 8 + q2 + 1] = u16(two >> 16);
    }
    if (lane % 4 == 0)
      p.lse[b * p.lse_stride_b + t * p.lse_stride_t + head * p.lse_stride_h] =
          l[h] > 0.0f ? m[h] + logf(l[h]) : neg_inf_f32();
  }
}

}  // namespace ejk::cuda
