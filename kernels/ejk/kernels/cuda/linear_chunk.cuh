// The chunked linear recurrence forward on tensor cores (mma.sync m16n8k16, 16-bit inputs, f32
// accumulation) with one scalar decay per step, shared by recurrent attention
// (cuda/recurrent_chunk.cuh) and Mamba-2's SSD (cuda/ssm2_chunk.cuh); each fills a ChunkView.
// The design: docs/design/linear_attention_chunked.md.
//
// One block of 4 warps per (sequence, head, tile of 32 state columns) walks the steps in chunks
// of C = 64; its [K, 32] state stays in f32 mma accumulators. With l_n the step's log decay,
// w_n its key weight and G_i the chunk's inclusive cumulative log decay at step i, per chunk:
//     o_i = scale (exp(G_i) q_i S + sum_{j <= i} exp(G_i - G_j) w_j (q_i . k_j) v_j) + skip v_i
//     S   = exp(G_C) S + sum_j exp(G_C - G_j) w_j k_j v_j^T
// Warp w owns output rows 16w..16w+15 (so only key blocks j <= 16w+15) and state rows
// w K/4..(w+1) K/4 - 1. The next chunk's q, k, v arrive by cp.async while this one computes.
#pragma once
#include "ejk/kernels/common/linear_chunk.h"
#include "ejk/kernels/cuda/mma_frag.cuh"

namespace ejk::cuda {

// A block's unit as the chunk loop sees it: step n's row of a token tensor is at base + n * step
// (step negative walks backwards), already at the block's head, group and columns.
struct ChunkView {
  const u16 *q, *k, *v;
  u16* o;
  i64 sq, sk, sv, so;
  i64 len;    // steps
  int ncols;  // state columns of the tile present (1..32); v is read and o written for these
  // State entry (row r, column c of the tile) at [r * srow + c * scol]; null: zeros / not written.
  const float* h0;
  float* ht;
  i64 srow, scol;
  // l_n = gate_add + gate_mul * gate[n * sg] (gate null: gate_add); w_n = gate[n * sg] when
  // weighted (Mamba-2's dt), else 1.
  const u16* gate;
  i64 sg;
  float gate_mul, gate_add;
  bool weighted;
  float scale, skip;
};

// 16-byte copies need 16-byte aligned rows.
__device__ __forceinline__ bool chunk_vec(const void* base, i64 step) {
  return reinterpret_cast<u64>(base) % 16 == 0 && step % 8 == 0;
}

// Steps [n0, n0 + rows) of one stream, columns [0, W) of which the first `cols` exist, into
// shared rows of pitch P; the rest is zero (it adds nothing to the products). vec: cp.async
// (cols a multiple of 8), else plain loads.
template <int W, int P>
__device__ __forceinline__ void chunk_load(u16* dst, const u16* base, i64 step, i64 n0, int rows, int cols, bool vec) {
  constexpr int segs = W / 8;
  for (int e = threadIdx.x; e < kLinearChunk * segs; e += kLinearChunkThreads) {
    const int r = e / segs, c = e % segs * 8;
    const bool in = r < rows && c < cols;
    const u16* src = base + (n0 + (in ? r : 0)) * step + (in ? c : 0);
    u16* d = dst + r * P + c;
    if (vec) {
      cp_async_16(smem_addr(d), src, in);
    } else {
#pragma unroll
      for (int x = 0; x < 8; ++x) d[x] = in && c + x < cols ? src[x] : u16(0);
    }
  }
}

// The chunk's inclusive cumulative log decays G and key weights W, by warp 0: lane l takes
// steps 2l and 2l + 1. Steps past `rows` decay nothing and weigh nothing.
template <Elem E>
__device__ __forceinline__ void chunk_decays(float* G, float* W, const ChunkView& v, i64 n0, int rows) {
  const int lane = threadIdx.x % 32;
  float x[2], w[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int r = 2 * lane + t;
    const float raw = r < rows && v.gate != nullptr ? to_f32<E>(v.gate[(n0 + r) * v.sg]) : 0.0f;
    x[t] = r < rows ? v.gate_add + v.gate_mul * raw : 0.0f;
    w[t] = r < rows ? (v.weighted ? raw : 1.0f) : 0.0f;
  }
  const float pair = x[0] + x[1];
  float incl = pair;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  G[2 * lane] = incl - x[1], G[2 * lane + 1] = incl;
  W[2 * lane] = w[0], W[2 * lane + 1] = w[1];
}

// State accumulators of a warp: K / 64 m16 tiles of rows, 4 n8 tiles of columns.
template <int K> constexpr int kChunkStateTiles = K / 64;

// acc[2 nb], acc[2 nb + 1] (16 x 16 column block nb < NB) += A_kb B_kb,nb over the k blocks kb <
// KB of [kb_lo, kb_hi], for nb <= nb_hi (the causal blocks' bounds; the rest are skipped):
// fa(a, kb) loads the A fragment of k block kb, fb(b, kb, nb) the two B fragments' pairs.
template <Elem E, int KB, int NB, class FragA, class FragB>
__device__ __forceinline__ void chunk_warp_mma(float (*acc)[4], int kb_lo, int kb_hi, int nb_hi, FragA&& fa,
                                               FragB&& fb) {
#pragma unroll
  for (int kb = 0; kb < KB; ++kb) {
    if (kb < kb_lo || kb > kb_hi) continue;
    u32 a[4];
    fa(a, kb);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      if (nb > nb_hi) continue;
      u32 b[4];
      fb(b, kb, nb);
      mma_16816<E>(acc[2 * nb], a, b[0], b[1]);
      mma_16816<E>(acc[2 * nb + 1], a, b[2], b[3]);
    }
  }
}

template <int K>
__device__ __forceinline__ void chunk_state_io(float (&S)[kChunkStateTiles<K>][4][4], const ChunkView& v, bool load) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int r = warp * (K / 4) + mt * 16 + lane / 4 + x / 2 * 8, c = nt * 8 + lane % 4 * 2 + x % 2;
        const i64 at = r * v.srow + c * v.scol;
        if (load) S[mt][nt][x] = v.h0 != nullptr && c < v.ncols ? v.h0[at] : 0.0f;
        else if (c < v.ncols) v.ht[at] = S[mt][nt][x];
      }
}

// The state tile in 16 bits, [K][32] of pitch PV, as the B operand of q S.
template <Elem E, int K, int PV>
__device__ __forceinline__ void chunk_put_state(u16* ss, const float (&S)[kChunkStateTiles<K>][4][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * (K / 4) + mt * 16 + lane / 4 + h * 8, c = nt * 8 + lane % 4 * 2;
        *reinterpret_cast<u32*>(ss + r * PV + c) = pack2<E>(S[mt][nt][2 * h], S[mt][nt][2 * h + 1]);
      }
}

// One chunk's outputs for the warp's 16 rows: the inter-chunk part from the state, then the
// masked, decayed, weighted intra-chunk part and the skip, written for the rows the chunk has.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_outputs(const ChunkView& view, const u16* sq, const u16* sk, const u16* sv,
                                              const u16* ss, const float* G, const float* W, i64 n0, int rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = 16 * warp;
  float P[8][4] = {}, O[4][4] = {};
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    u32 a[4], b[4];
    frag_a(a, sq, PK, row0, kk * 16);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      if (np > warp) continue;  // keys after the warp's last row are masked
      frag_b_nk(b, sk, PK, np * 16, kk * 16);
      mma_16816<E>(P[2 * np], a, b[0], b[1]);
      mma_16816<E>(P[2 * np + 1], a, b[2], b[3]);
    }
#pragma unroll
    for (int vp = 0; vp < 2; ++vp) {
      frag_b_kn(b, ss, PV, kk * 16, vp * 16);
      mma_16816<E>(O[2 * vp], a, b[0], b[1]);
      mma_16816<E>(O[2 * vp + 1], a, b[2], b[3]);
    }
  }
  const float scale = view.scale;
  const int i0 = row0 + lane / 4, i1 = i0 + 8;
  const float g0 = G[i0], g1 = G[i1], f0 = scale * expf(g0), f1 = scale * expf(g1);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) O[nt][0] *= f0, O[nt][1] *= f0, O[nt][2] *= f1, O[nt][3] *= f1;
  u32 pa[4][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int j = nt * 8 + lane % 4 * 2;
    const float gj0 = G[j], gj1 = G[j + 1], wj0 = scale * W[j], wj1 = scale * W[j + 1];
    const float p00 = j <= i0 ? wj0 * P[nt][0] * expf(g0 - gj0) : 0.0f;
    const float p01 = j + 1 <= i0 ? wj1 * P[nt][1] * expf(g0 - gj1) : 0.0f;
    const float p10 = j <= i1 ? wj0 * P[nt][2] * expf(g1 - gj0) : 0.0f;
    const float p11 = j + 1 <= i1 ? wj1 * P[nt][3] * expf(g1 - gj1) : 0.0f;
    pa[nt / 2][nt % 2 * 2] = pack2<E>(p00, p01), pa[nt / 2][nt % 2 * 2 + 1] = pack2<E>(p10, p11);
  }
#pragma unroll
  for (int kb = 0; kb < 4; ++kb) {
    if (kb > warp) continue;
#pragma unroll
    for (int vp = 0; vp < 2; ++vp) {
      u32 b[4];
      frag_b_kn(b, sv, PV, kb * 16, vp * 16);
      mma_16816<E>(O[2 * vp], pa[kb], b[0], b[1]);
      mma_16816<E>(O[2 * vp + 1], pa[kb], b[2], b[3]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = h ? i1 : i0;
    if (i >= rows) continue;
    u16* o = view.o + (n0 + i) * view.so;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = nt * 8 + lane % 4 * 2;
      float y0 = O[nt][2 * h], y1 = O[nt][2 * h + 1];
      if (view.skip != 0.0f)
        y0 += view.skip * to_f32<E>(sv[i * PV + c]), y1 += view.skip * to_f32<E>(sv[i * PV + c + 1]);
      const u32 v = pack2<E>(y0, y1);
      if (c < view.ncols) o[c] = u16(v & 0xffffu);
      if (c + 1 < view.ncols) o[c + 1] = u16(v >> 16);
    }
  }
}

// kw = k_j w_j exp(G_C - G_j): the keys as they enter the state at the chunk's end.
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_decay_keys(u16* kw, const u16* sk, const float* G, const float* W) {
  constexpr int segs = K / 8;
  const float last = G[kLinearChunk - 1];
  for (int e = threadIdx.x; e < kLinearChunk * segs; e += kLinearChunkThreads) {
    const int r = e / segs, c = e % segs * 8;
    const float w = W[r] == 0.0f ? 0.0f : W[r] * expf(last - G[r]);
    const uint4 x = *reinterpret_cast<const uint4*>(sk + r * PK + c);
    const u32 in[4] = {x.x, x.y, x.z, x.w};
    u32 out[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      out[q] = pack2<E>(to_f32<E>(u16(in[q] & 0xffffu)) * w, to_f32<E>(u16(in[q] >> 16)) * w);
    *reinterpret_cast<uint4*>(kw + r * PK + c) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

// S = exp(G_C) S + kw^T v over the chunk's 64 steps.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_update(float (&S)[kChunkStateTiles<K>][4][4], const u16* kw, const u16* sv,
                                             const float* G) {
  const int warp = threadIdx.x / 32;
  const float decay = expf(G[kLinearChunk - 1]);
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) S[mt][nt][x] *= decay;
#pragma unroll
  for (int kb = 0; kb < kLinearChunk / 16; ++kb) {
    u32 b[2][4];
    frag_b_kn(b[0], sv, PV, kb * 16, 0);
    frag_b_kn(b[1], sv, PV, kb * 16, 16);
#pragma unroll
    for (int mt = 0; mt < kChunkStateTiles<K>; ++mt) {
      u32 a[4];
      frag_a_t(a, kw, PK, warp * (K / 4) + mt * 16, kb * 16);
#pragma unroll
      for (int vp = 0; vp < 2; ++vp) {
        mma_16816<E>(S[mt][2 * vp], a, b[vp][0], b[vp][1]);
        mma_16816<E>(S[mt][2 * vp + 1], a, b[vp][2], b[vp][3]);
      }
    }
  }
}

// The block's whole walk. E: bf16 or f16; K: 64 or 128.
template <Elem E, int K> __device__ void linear_chunk_fwd(const ChunkView& view) {
  static_assert(E != Elem::f32 && linear_chunk_rows(K), "the chunked kernel takes 16-bit K 64/128");
  constexpr int C = kLinearChunk, PK = int(linear_chunk_pitch(K)), PV = int(linear_chunk_pitch(kLinearChunkCols));
  extern __shared__ __align__(16) unsigned char linear_chunk_smem[];
  u16* const sq = reinterpret_cast<u16*>(linear_chunk_smem);
  u16* const sk = sq + 2 * C * PK;
  u16* const sv = sk + 2 * C * PK;
  u16* const kw = sv + 2 * C * PV;
  u16* const ss = kw + C * PK;
  float* const G = reinterpret_cast<float*>(linear_chunk_smem + linear_chunk_halves(K) * 2);
  float* const W = G + C;

  const i64 chunks = ceil_div<i64>(view.len, C);
  const bool vec_qk = chunk_vec(view.q, view.sq) && chunk_vec(view.k, view.sk);
  const bool vec_v = chunk_vec(view.v, view.sv) && view.ncols % 8 == 0;

  float S[kChunkStateTiles<K>][4][4];
  chunk_state_io<K>(S, view, true);
  chunk_put_state<E, K, PV>(ss, S);

  auto load = [&](i64 c) {
    const int st = int(c & 1), rows = int(min_of<i64>(C, view.len - c * C));
    chunk_load<K, PK>(sq + st * C * PK, view.q, view.sq, c * C, rows, K, vec_qk);
    chunk_load<K, PK>(sk + st * C * PK, view.k, view.sk, c * C, rows, K, vec_qk);
    chunk_load<kLinearChunkCols, PV>(sv + st * C * PV, view.v, view.sv, c * C, rows, view.ncols, vec_v);
  };
  if (chunks > 0) load(0);
  cp_async_commit();
  for (i64 c = 0; c < chunks; ++c) {
    const int st = int(c & 1), rows = int(min_of<i64>(C, view.len - c * C));
    if (c + 1 < chunks) load(c + 1);
    cp_async_commit();  // possibly empty: the wait below then always leaves one group in flight
    cp_async_wait<1>();
    if (threadIdx.x < 32) chunk_decays<E>(G, W, view, c * C, rows);
    __syncthreads();  // this chunk's operands, G, W and the state tile are visible
    const u16 *q = sq + st * C * PK, *k = sk + st * C * PK, *v = sv + st * C * PV;
    chunk_outputs<E, K, PK, PV>(view, q, k, v, ss, G, W, c * C, rows);
    chunk_decay_keys<E, K, PK>(kw, k, G, W);
    __syncthreads();  // kw written; every read of the old state tile done
    chunk_update<E, K, PK, PV>(S, kw, v, G);
    chunk_put_state<E, K, PV>(ss, S);
    __syncthreads();  // the stage, kw, G and W are free for the next chunk
  }
  if (view.ht != nullptr) chunk_state_io<K>(S, view, false);
}

}  // namespace ejk::cuda
