// The chunked backward of cuda/linear_chunk.cuh's scalar-decay recurrence on tensor cores
// (mma.sync m16n8k16, 16-bit operands, f32 accumulation). The design and the derivation:
// docs/design/linear_attention_chunked.md ("The backward").
//
// One block of 4 warps per (sequence, head, tile of 32 state columns), as the forward. A first
// pass walks the chunks forward and stores every chunk-boundary state (f32) in the block's
// workspace; the second walks them from the last, carrying dS = dL/dS at the chunk's end in f32
// accumulators. Per chunk, with A_ij = exp(G_i - G_j) w_j [j <= i] and f_j = w_j exp(G_C - G_j):
//     dq = scale exp(G) dO S0^T + (scale A . dO V^T) K        (rows i, warp w the 16 of block w)
//     dk = f V dS^T + (scale A . dO V^T)^T Q                  (rows j, likewise)
//     dv = f K dS + (scale A . Q K^T)^T dO + skip dO
//     dS <- exp(G_C) dS + (scale exp(G) Q)^T dO
// and the gradient of every step's log decay (cuda/linear_chunk_bwd_gates.cuh). dq, dk and d l
// are this tile's partial sums over its 32 columns (f32, summed over the tiles by the caller); dv
// is the tile's. Weighted steps (Mamba-2: w_n = dt_n) also give dw_n = k_n . dk'_n, dk' the
// gradient of the weighted key w k (dk = w dk').
#pragma once
#include "ejk/kernels/cuda/linear_chunk_bwd_gates.cuh"

namespace ejk::cuda {

// The accumulator state tile to / from f32 [K][32] rows (a checkpoint).
template <int K>
__device__ __forceinline__ void chunk_ckpt_io(float (&S)[kChunkStateTiles<K>][4][4], float* slot, bool load) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int r = warp * (K / 4) + mt * 16 + lane / 4 + x / 2 * 8, c = nt * 8 + lane % 4 * 2 + x % 2;
        if (load) S[mt][nt][x] = slot[r * kLinearChunkCols + c];
        else slot[r * kLinearChunkCols + c] = S[mt][nt][x];
      }
}

// Pass 1: the state before every chunk and after the last, into the checkpoints.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_states(const ChunkBwdView& b, u16* sk, u16* sv, u16* kw, float* G, float* W) {
  const ChunkView& v = b.f;
  const i64 chunks = ceil_div<i64>(v.len, kLinearChunk);
  const bool vec_k = chunk_vec(v.k, v.sk), vec_v = chunk_vec(v.v, v.sv) && v.ncols % 8 == 0;
  float S[kChunkStateTiles<K>][4][4];
  chunk_state_io<K>(S, v, true);
  for (i64 c = 0; c < chunks; ++c) {
    const int rows = int(min_of<i64>(kLinearChunk, v.len - c * kLinearChunk));
    chunk_ckpt_io<K>(S, b.ckpt + c * K * kLinearChunkCols, false);
    chunk_load<K, PK>(sk, v.k, v.sk, c * kLinearChunk, rows, K, vec_k);
    chunk_load<kLinearChunkCols, PV>(sv, v.v, v.sv, c * kLinearChunk, rows, v.ncols, vec_v);
    cp_async_commit();
    cp_async_wait<0>();
    if (threadIdx.x < 32) chunk_decays<E>(G, W, v, c * kLinearChunk, rows);
    __syncthreads();
    chunk_decay_keys<E, K, PK>(kw, sk, G, W);
    __syncthreads();
    chunk_update<E, K, PK, PV>(S, kw, sv, G);
    __syncthreads();  // k, v, kw, G and W are free for the next chunk
  }
  chunk_ckpt_io<K>(S, b.ckpt + chunks * K * kLinearChunkCols, false);
}

// The masked, decayed, scaled products of the warp's rows i against keys j: PA = scale A . Q K^T
// and dA = scale A . dO V^T, into shared [i][j] rows (only the key blocks <= the warp's), and dA
// also as A fragments (da) for dq; with gs, T's row sums and the warp's column sums.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_scores(u32 (&da)[4][4], u16* spa, u16* sda, const u16* sq, const u16* sk,
                                                 const u16* sv, const u16* sdo, const float* G, const float* W,
                                                 float scale, const ChunkGateSums* gs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = 16 * warp;
  float P[8][4] = {}, dP[8][4] = {};
  chunk_warp_mma<E, K / 16, 4>(
      P, 0, K / 16, warp, [&](u32(&a)[4], int kb) { frag_a(a, sq, PK, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_nk(b, sk, PK, nb * 16, kb * 16); });
  chunk_warp_mma<E, kLinearChunkCols / 16, 4>(
      dP, 0, kLinearChunkCols / 16, warp, [&](u32(&a)[4], int kb) { frag_a(a, sdo, PV, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_nk(b, sv, PV, nb * 16, kb * 16); });
  const int i0 = row0 + lane / 4, i1 = i0 + 8;
  const float g0 = G[i0], g1 = G[i1];
  float r0 = 0.0f, r1 = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    if (nt / 2 > warp) {
      if (gs != nullptr && lane < 4) gs->col[warp * kLinearChunk + nt * 8 + lane * 2] = 0.0f,
                                     gs->col[warp * kLinearChunk + nt * 8 + lane * 2 + 1] = 0.0f;
      continue;
    }
    const int j = nt * 8 + lane % 4 * 2;
    // m: the mask and decays without the key weight (dA' in shared memory, for dk'); with it
    // for PA and for dA in dq.
    const float m00 = j <= i0 ? scale * expf(g0 - G[j]) : 0.0f;
    const float m01 = j + 1 <= i0 ? scale * expf(g0 - G[j + 1]) : 0.0f;
    const float m10 = j <= i1 ? scale * expf(g1 - G[j]) : 0.0f;
    const float m11 = j + 1 <= i1 ? scale * expf(g1 - G[j + 1]) : 0.0f;
    const float w0 = W[j], w1 = W[j + 1];
    *reinterpret_cast<u32*>(spa + i0 * kChunkP + j) = pack2<E>(w0 * m00 * P[nt][0], w1 * m01 * P[nt][1]);
    *reinterpret_cast<u32*>(spa + i1 * kChunkP + j) = pack2<E>(w0 * m10 * P[nt][2], w1 * m11 * P[nt][3]);
    *reinterpret_cast<u32*>(sda + i0 * kChunkP + j) = pack2<E>(m00 * dP[nt][0], m01 * dP[nt][1]);
    *reinterpret_cast<u32*>(sda + i1 * kChunkP + j) = pack2<E>(m10 * dP[nt][2], m11 * dP[nt][3]);
    da[nt / 2][nt % 2 * 2] = pack2<E>(w0 * m00 * dP[nt][0], w1 * m01 * dP[nt][1]);
    da[nt / 2][nt % 2 * 2 + 1] = pack2<E>(w0 * m10 * dP[nt][2], w1 * m11 * dP[nt][3]);
    if (gs == nullptr) continue;
    const float t00 = w0 * m00 * P[nt][0] * dP[nt][0], t01 = w1 * m01 * P[nt][1] * dP[nt][1];
    const float t10 = w0 * m10 * P[nt][2] * dP[nt][2], t11 = w1 * m11 * P[nt][3] * dP[nt][3];
    r0 += t00 + t01, r1 += t10 + t11;
    float c0 = t00 + t10, c1 = t01 + t11;  // columns j, j + 1 over the lane's rows, then the warp's
#pragma unroll
    for (int o = 4; o < 32; o *= 2) c0 += __shfl_xor_sync(0xffffffffu, c0, o), c1 += __shfl_xor_sync(0xffffffffu, c1, o);
    if (lane < 4) gs->col[warp * kLinearChunk + j] = c0, gs->col[warp * kLinearChunk + j + 1] = c1;
  }
  if (gs == nullptr) return;
  r0 = quad_sum(r0), r1 = quad_sum(r1);
  if (lane % 4 == 0) gs->row[i0] = r0, gs->row[i1] = r1;
}

// Rows 16w.. of a [64][K] f32 accumulator set: the partial sums at part + (n0 + i) * spart + off
// (for the steps the chunk has), and g[i][r] += sign * x[i][r] * acc (the row gate terms; g
// null: none).
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_bwd_put_rows(const float (&acc)[K / 8][4], const ChunkBwdView& b, i64 n0,
                                                   int rows, int off, const u16* x, float* g, bool first) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = 16 * warp + lane / 4 + h * 8;
    float* out = b.part + (n0 + i) * b.spart + off;
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt) {
      const int r = nt * 8 + lane % 4 * 2;
      const float y0 = acc[nt][2 * h], y1 = acc[nt][2 * h + 1];
      if (i < rows) out[r] = y0, out[r + 1] = y1;
      if (g == nullptr) continue;
      const float t0 = to_f32<E>(x[i * PK + r]) * y0, t1 = to_f32<E>(x[i * PK + r + 1]) * y1;
      if (first) g[i * K + r] = t0, g[i * K + r + 1] = t1;
      else g[i * K + r] -= t0, g[i * K + r + 1] -= t1;
    }
  }
}

// dq for the warp's rows: scale exp(G_i) dO S0^T + dA K (gs: the first part's q_i . dq_i).
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_dq(float (&acc)[K / 8][4], const u32 (&da)[4][4], const u16* sdo,
                                             const u16* ss, const u16* sk, const u16* sq, const float* G, float scale,
                                             const ChunkGateSums* gs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = 16 * warp;
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) acc[nt][x] = 0.0f;
  chunk_warp_mma<E, kLinearChunkCols / 16, K / 16>(
      acc, 0, kLinearChunkCols / 16, K / 16, [&](u32(&a)[4], int kb) { frag_a(a, sdo, PV, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_nk(b, ss, PV, nb * 16, kb * 16); });
  const float f0 = scale * expf(G[row0 + lane / 4]), f1 = scale * expf(G[row0 + lane / 4 + 8]);
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt) acc[nt][0] *= f0, acc[nt][1] *= f0, acc[nt][2] *= f1, acc[nt][3] *= f1;
  if (gs != nullptr) chunk_row_dots<E, K, PK>(gs->inter, acc, sq);
  chunk_warp_mma<E, 4, K / 16>(
      acc, 0, warp, K / 16, [&](u32(&a)[4], int kb) { for (int x = 0; x < 4; ++x) a[x] = da[kb][x]; },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, sk, PK, kb * 16, nb * 16); });
}

// f_j = w_j exp(G_C - G_j) of the warp's rows j0 = 16w + lane / 4 and j0 + 8 (with_w false:
// exp(G_C - G_j), zero where w_j is: steps past the end).
__device__ __forceinline__ void chunk_key_decays(float& f0, float& f1, const float* G, const float* W, bool with_w) {
  const int j0 = 16 * (threadIdx.x / 32) + threadIdx.x % 32 / 4, j1 = j0 + 8;
  const float last = G[kLinearChunk - 1];
  f0 = W[j0] == 0.0f ? 0.0f : (with_w ? W[j0] : 1.0f) * expf(last - G[j0]);
  f1 = W[j1] == 0.0f ? 0.0f : (with_w ? W[j1] : 1.0f) * expf(last - G[j1]);
}

// dk' for the warp's rows j: exp(G_C - G_j) V dS^T + dA'^T Q (query blocks i >= j's); the first
// part's w_j k_j . dk'_j into gs (scalar gates), or its per-row sums over the warp's j into ks.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_dk(float (&acc)[K / 8][4], const u16* sv, const u16* sds, const u16* sda,
                                             const u16* sq, const u16* sk, const float* G, const float* W,
                                             const ChunkGateSums* gs, float* ks) {
  const int warp = threadIdx.x / 32, row0 = 16 * warp;
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) acc[nt][x] = 0.0f;
  chunk_warp_mma<E, kLinearChunkCols / 16, K / 16>(
      acc, 0, kLinearChunkCols / 16, K / 16, [&](u32(&a)[4], int kb) { frag_a(a, sv, PV, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_nk(b, sds, PV, nb * 16, kb * 16); });
  float f0, f1;
  chunk_key_decays(f0, f1, G, W, false);
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt) acc[nt][0] *= f0, acc[nt][1] *= f0, acc[nt][2] *= f1, acc[nt][3] *= f1;
  if (gs != nullptr) {  // k_j . dk_j's state part, w_j k_j . dk'_j
    chunk_row_dots<E, K, PK>(gs->state, acc, sk);
    const int j0 = row0 + threadIdx.x % 32 / 4;
    if (threadIdx.x % 4 == 0) gs->state[j0] *= W[j0], gs->state[j0 + 8] *= W[j0 + 8];
  } else {
    chunk_col_dots<E, K, PK>(ks, acc, sk, W);
  }
  chunk_warp_mma<E, 4, K / 16>(
      acc, warp, 4, K / 16, [&](u32(&a)[4], int kb) { frag_a_t(a, sda, kChunkP, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, sq, PK, kb * 16, nb * 16); });
}

// dk = w dk' for the warp's rows, after dw = k . dk' (weighted: written for the steps present).
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_bwd_key_weights(float (&acc)[K / 8][4], const ChunkBwdView& b, const u16* sk,
                                                      const float* W, i64 n0, int rows) {
  const int lane = threadIdx.x % 32, row0 = 16 * (threadIdx.x / 32);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = row0 + lane / 4 + h * 8;
    if (b.f.weighted) {
      const float dw = chunk_row_dot<E, K, PK>(acc, sk, j, h);
      if (lane % 4 == 0 && j < rows) b.part[(n0 + j) * b.spart + 2 * K + 1] = dw;
    }
#pragma unroll
    for (int nt = 0; nt < K / 8; ++nt) acc[nt][2 * h] *= W[j], acc[nt][2 * h + 1] *= W[j];
  }
}

// dv for the warp's rows j without the skip: f K dS + PA^T dO; with vs, the first part's column
// sums of v_j dv_j over the warp's rows (the column gate's end term).
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_dv(float (&acc)[4][4], const u16* sk, const u16* sds, const u16* spa,
                                             const u16* sdo, const u16* sv, const float* G, const float* W,
                                             float* vs) {
  const int warp = threadIdx.x / 32, row0 = 16 * warp;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) acc[nt][x] = 0.0f;
  chunk_warp_mma<E, K / 16, 2>(
      acc, 0, K / 16, 2, [&](u32(&a)[4], int kb) { frag_a(a, sk, PK, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, sds, PV, kb * 16, nb * 16); });
  float f0, f1;
  chunk_key_decays(f0, f1, G, W, true);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) acc[nt][0] *= f0, acc[nt][1] *= f0, acc[nt][2] *= f1, acc[nt][3] *= f1;
  if (vs != nullptr) chunk_col_dots<E, kLinearChunkCols, PV>(vs, acc, sv, nullptr);  // f holds the weights
  chunk_warp_mma<E, 4, 2>(
      acc, warp, 4, 2, [&](u32(&a)[4], int kb) { frag_a_t(a, spa, kChunkP, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, sdo, PV, kb * 16, nb * 16); });
}

// The warp's rows of dv (acc plus the skip), for the steps and columns present.
template <Elem E, int PV>
__device__ __forceinline__ void chunk_bwd_put_dv(const ChunkBwdView& b, const float (&acc)[4][4], const u16* sdo,
                                                 i64 n0, int rows) {
  const int lane = threadIdx.x % 32, row0 = 16 * (threadIdx.x / 32);
  if (b.dv == nullptr) return;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int j = row0 + lane / 4 + h * 8;
    if (j >= rows) continue;
    u16* o = b.dv + (n0 + j) * b.sdv;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = nt * 8 + lane % 4 * 2;
      float y0 = acc[nt][2 * h], y1 = acc[nt][2 * h + 1];
      if (b.f.skip != 0.0f)
        y0 += b.f.skip * to_f32<E>(sdo[j * PV + c]), y1 += b.f.skip * to_f32<E>(sdo[j * PV + c + 1]);
      const u32 y = pack2<E>(y0, y1);
      if (c < b.f.ncols) o[c] = u16(y & 0xffffu);
      if (c + 1 < b.f.ncols) o[c + 1] = u16(y >> 16);
    }
  }
}

// qw = scale exp(G_i) q_i for the warp's rows: the queries as they enter dS.
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_scaled_queries(u16* qw, const u16* sq, const float* G, float scale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int e = lane; e < 16 * (K / 2); e += 32) {
    const int i = 16 * warp + e / (K / 2), c = e % (K / 2) * 2;
    const float f = scale * expf(G[i]);
    const u32 x = *reinterpret_cast<const u32*>(sq + i * PK + c);
    *reinterpret_cast<u32*>(qw + i * PK + c) = pack2<E>(to_f32<E>(u16(x & 0xffffu)) * f, to_f32<E>(u16(x >> 16)) * f);
  }
}

// The block's whole backward. E: bf16 or f16; K: 64 or 128.
template <Elem E, int K> __device__ void linear_chunk_bwd(const ChunkBwdView& b) {
  static_assert(E != Elem::f32 && linear_chunk_rows(K), "the chunked kernel takes 16-bit K 64/128");
  constexpr int C = kLinearChunk, PK = int(linear_chunk_pitch(K)), PV = int(linear_chunk_pitch(kLinearChunkCols));
  extern __shared__ __align__(16) unsigned char linear_chunk_smem[];
  u16* const sq = reinterpret_cast<u16*>(linear_chunk_smem);
  u16* const sk = sq + C * PK;
  u16* const qw = sk + C * PK;
  u16* const sv = qw + C * PK;
  u16* const sdo = sv + C * PV;
  u16* const spa = sdo + C * PV;
  u16* const sda = spa + C * kChunkP;
  u16* const ss = sda + C * kChunkP;
  u16* const sds = ss + K * PV;
  float* const gt = reinterpret_cast<float*>(linear_chunk_smem + linear_chunk_bwd_halves(K) * 2);
  float* const G = gt + C * K;
  float* const W = G + C;
  float* const rs = W + C;
  float* const yv = rs + K;
  float* const cs = yv + C * kLinearChunkCols;
  float* const ks = cs + 4 * kLinearChunkCols;
  float* const vs = ks + 4 * K;
  const ChunkView& v = b.f;
  // The scalar gate's terms in the row gates' room.
  const ChunkGateSums gs{gt, gt + C, gt + 3 * C, gt + 2 * C};
  const ChunkGateSums* const gsp = b.row_gates ? nullptr : &gs;

  chunk_bwd_states<E, K, PK, PV>(b, sk, sv, qw, G, W);
  const i64 chunks = ceil_div<i64>(v.len, C);
  const bool vec_qk = chunk_vec(v.q, v.sq) && chunk_vec(v.k, v.sk);
  const bool vec_v = chunk_vec(v.v, v.sv) && v.ncols % 8 == 0, vec_do = chunk_vec(b.d_o, b.sdo) && v.ncols % 8 == 0;
  ChunkView dv_state = v;  // dS's entries at the state's strides
  dv_state.h0 = b.dht, dv_state.ht = b.dh0;
  float D[kChunkStateTiles<K>][4][4];
  chunk_state_io<K>(D, dv_state, true);
  chunk_put_state<E, K, PV>(sds, D);
  for (i64 c = chunks - 1; c >= 0; --c) {
    const i64 n0 = c * C;
    const int rows = int(min_of<i64>(C, v.len - n0));
    chunk_load<K, PK>(sq, v.q, v.sq, n0, rows, K, vec_qk);
    chunk_load<K, PK>(sk, v.k, v.sk, n0, rows, K, vec_qk);
    chunk_load<kLinearChunkCols, PV>(sv, v.v, v.sv, n0, rows, v.ncols, vec_v);
    chunk_load<kLinearChunkCols, PV>(sdo, b.d_o, b.sdo, n0, rows, v.ncols, vec_do);
    cp_async_commit();
    const float* start = b.ckpt + c * K * kLinearChunkCols;
    for (int e = threadIdx.x; e < K * kLinearChunkCols / 2; e += kLinearChunkThreads) {
      const int r = 2 * e / kLinearChunkCols, col = 2 * e % kLinearChunkCols;
      *reinterpret_cast<u32*>(ss + r * PV + col) = pack2<E>(start[2 * e], start[2 * e + 1]);
    }
    cp_async_wait<0>();
    if (threadIdx.x < 32) chunk_decays<E>(G, W, v, n0, rows);
    __syncthreads();  // the chunk's operands, S0, G and W are visible
    // The end state's term: dS . S0 per row here, the rest from dk's state part (ks, gs.state).
    chunk_row_terms<K>(rs, D, start);
    if (b.dgv != nullptr) chunk_col_terms<K>(cs, D, start);
    {
      u32 da[4][4];
      chunk_bwd_scores<E, K, PK, PV>(da, spa, sda, sq, sk, sv, sdo, G, W, v.scale, gsp);
      float acc[K / 8][4];
      chunk_bwd_dq<E, K, PK, PV>(acc, da, sdo, ss, sk, sq, G, v.scale, gsp);
      chunk_bwd_put_rows<E, K, PK>(acc, b, n0, rows, 0, sq, b.row_gates ? gt : nullptr, true);
    }
    chunk_scaled_queries<E, K, PK>(qw, sq, G, v.scale);
    __syncthreads();  // PA, dA, the dq gate terms, qw and the row terms are visible
    {
      float acc[K / 8][4];
      chunk_bwd_dk<E, K, PK, PV>(acc, sv, sds, sda, sq, sk, G, W, gsp, ks);
      chunk_bwd_key_weights<E, K, PK>(acc, b, sk, W, n0, rows);
      chunk_bwd_put_rows<E, K, PK>(acc, b, n0, rows, K, sk, b.row_gates ? gt : nullptr, false);
    }
    {
      float acc[4][4];
      chunk_bwd_dv<E, K, PK, PV>(acc, sk, sds, spa, sdo, sv, G, W, b.dgv != nullptr ? vs : nullptr);
      if (b.dgv != nullptr) chunk_bwd_col_rows<E, K, PK, PV>(yv, acc, sq, ss, spa, sv, sdo, G, v.scale);
      chunk_bwd_put_dv<E, PV>(b, acc, sdo, n0, rows);
    }
    __syncthreads();  // every read of the old dS copy is done and the gate terms are complete
    if (b.row_gates) chunk_bwd_gates<E, K>(b, gt, rs, ks, G, yv, cs, vs, n0, rows);
    else chunk_bwd_scalar_gates<K>(b, gs, rs, G, n0, rows);
    chunk_update<E, K, PK, PV>(D, qw, sdo, G);
    chunk_put_state<E, K, PV>(sds, D);
    __syncthreads();  // the stage, G, W and the gate terms are free for the next chunk
  }
  if (b.dh0 != nullptr) chunk_state_io<K>(D, dv_state, false);
}

}  // namespace ejk::cuda
