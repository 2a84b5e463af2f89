// CUDA recurrent attention forward, chunked on tensor cores (mma.sync m16n8k16, 16-bit inputs,
// f32 accumulation), for a decay that is one scalar per head and token (log space). Semantics:
// common/recurrent_params.h; the design: docs/design/linear_attention_chunked.md.
//
// One block of 4 warps per (sequence, head, tile of 32 state columns) walks the sequence in
// chunks of C = 64 processing steps; its [K, 32] state stays in f32 mma accumulators. With G_i
// the chunk's inclusive cumulative log decay at step i, per chunk:
//     o_i = scale (exp(G_i) q_i S + sum_{j <= i} exp(G_i - G_j) (q_i . k_j) v_j)
//     S   = exp(G_C) S + sum_j exp(G_C - G_j) k_j v_j^T
// Warp w owns output rows 16w..16w+15 (so only key blocks j <= 16w+15) and state rows
// w K/4..(w+1) K/4 - 1. The next chunk's q, k, v arrive by cp.async while this one computes.
#pragma once
#include "ejk/kernels/cuda/mma_frag.cuh"
#include "ejk/kernels/cuda/recurrent.cuh"

namespace ejk::cuda {

// 16-byte copies need 16-byte aligned rows: the base and every stride a multiple of 8 elements.
__device__ __forceinline__ bool recurrent_chunk_vec(const RecurrentTokens& t) {
  return reinterpret_cast<u64>(t.data) % 16 == 0 && t.sb % 8 == 0 && t.st % 8 == 0 && t.sh % 8 == 0;
}

// Steps [n0, n0 + rows) of one token tensor, columns [c0, c0 + W), into shared rows of pitch P;
// rows past `rows` are zero (they add nothing to the products). vec: cp.async, else plain loads.
template <class Cfg, int W, int P>
__device__ __forceinline__ void recurrent_chunk_load(u16* dst, const RecurrentParams& p, const RecurrentTokens& t,
                                                     const RecurrentUnit& u, i64 n0, int rows, i64 c0, bool vec) {
  constexpr int segs = W / 8;
  for (int e = threadIdx.x; e < kRecurrentChunk * segs; e += kRecurrentChunkThreads) {
    const int r = e / segs, c = e % segs * 8;
    const bool in = r < rows;
    const i64 tok = recurrent_token(u.sp, n0 + (in ? r : 0), Cfg::kReverse);
    const u16* src = static_cast<const u16*>(t.data) + recurrent_at(p, t, u.s, tok, u.h) + c0 + c;
    u16* d = dst + r * P + c;
    if (vec) {
      cp_async_16(smem_addr(d), src, in);
    } else {
#pragma unroll
      for (int x = 0; x < 8; ++x) d[x] = in ? src[x] : u16(0);
    }
  }
}

// The chunk's inclusive cumulative log decays, by warp 0: lane l sums steps 2l and 2l + 1.
// Steps past `rows` decay nothing, so G there stays G at the chunk's last step.
__device__ __forceinline__ void recurrent_chunk_decays(float* G, float log_decay, int rows) {
  const int lane = threadIdx.x % 32;
  const float x0 = 2 * lane < rows ? log_decay : 0.0f, x1 = x0 + (2 * lane + 1 < rows ? log_decay : 0.0f);
  float incl = x1;
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  G[2 * lane] = incl - x1 + x0, G[2 * lane + 1] = incl;
}

// State accumulators of a warp: kK / 64 m16 tiles of rows, 4 n8 tiles of columns.
template <class Cfg> constexpr int kChunkStateTiles = Cfg::kK / 64;

template <class Cfg>
__device__ __forceinline__ void recurrent_chunk_state_io(float (&S)[kChunkStateTiles<Cfg>][4][4], float* state,
                                                         const RecurrentParams& p, const RecurrentUnit& u, bool load) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* base = state + recurrent_state_at(p, u.s, u.h) + u.c0;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<Cfg>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const i64 at = (warp * (Cfg::kK / 4) + mt * 16 + lane / 4 + x / 2 * 8) * p.dv_ + nt * 8 + lane % 4 * 2 + x % 2;
        if (load) S[mt][nt][x] = base[at];
        else base[at] = S[mt][nt][x];
      }
}

// The state tile in 16 bits, [K][32] of pitch PV, as the B operand of q S.
template <class Cfg, int PV>
__device__ __forceinline__ void recurrent_chunk_put_state(u16* ss, const float (&S)[kChunkStateTiles<Cfg>][4][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<Cfg>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * (Cfg::kK / 4) + mt * 16 + lane / 4 + h * 8, c = nt * 8 + lane % 4 * 2;
        *reinterpret_cast<u32*>(ss + r * PV + c) = pack2<Cfg::E>(S[mt][nt][2 * h], S[mt][nt][2 * h + 1]);
      }
}

// One chunk's outputs for the warp's 16 rows: the inter-chunk part from the state, then the
// masked, decayed intra-chunk part, written for the rows the chunk has.
template <class Cfg, int PK, int PV>
__device__ __forceinline__ void recurrent_chunk_outputs(const RecurrentParams& p, const RecurrentUnit& u,
                                                        const u16* sq, const u16* sk, const u16* sv, const u16* ss,
                                                        const float* G, i64 n0, int rows) {
  constexpr Elem E = Cfg::E;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = 16 * warp;
  float P[8][4] = {}, O[4][4] = {};
#pragma unroll
  for (int kk = 0; kk < Cfg::kK / 16; ++kk) {
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
  const int i0 = row0 + lane / 4, i1 = i0 + 8;
  const float g0 = G[i0], g1 = G[i1], f0 = p.scale * expf(g0), f1 = p.scale * expf(g1);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) O[nt][0] *= f0, O[nt][1] *= f0, O[nt][2] *= f1, O[nt][3] *= f1;
  u32 pa[4][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int j = nt * 8 + lane % 4 * 2;
    const float gj0 = G[j], gj1 = G[j + 1];
    const float p00 = j <= i0 ? p.scale * P[nt][0] * expf(g0 - gj0) : 0.0f;
    const float p01 = j + 1 <= i0 ? p.scale * P[nt][1] * expf(g0 - gj1) : 0.0f;
    const float p10 = j <= i1 ? p.scale * P[nt][2] * expf(g1 - gj0) : 0.0f;
    const float p11 = j + 1 <= i1 ? p.scale * P[nt][3] * expf(g1 - gj1) : 0.0f;
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
  u16* o = static_cast<u16*>(p.o.data);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = h ? i1 : i0;
    if (i >= rows) continue;
    const i64 at = recurrent_at(p, p.o, u.s, recurrent_token(u.sp, n0 + i, Cfg::kReverse), u.h) + u.c0;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const u32 v = pack2<E>(O[nt][2 * h], O[nt][2 * h + 1]);
      const i64 c = at + nt * 8 + lane % 4 * 2;
      o[c] = u16(v & 0xffffu), o[c + 1] = u16(v >> 16);
    }
  }
}

// kw = k_j exp(G_C - G_j): the keys as they enter the state at the chunk's end.
template <class Cfg, int PK>
__device__ __forceinline__ void recurrent_chunk_decay_keys(u16* kw, const u16* sk, const float* G) {
  constexpr int segs = Cfg::kK / 8;
  const float last = G[kRecurrentChunk - 1];
  for (int e = threadIdx.x; e < kRecurrentChunk * segs; e += kRecurrentChunkThreads) {
    const int r = e / segs, c = e % segs * 8;
    const float w = expf(last - G[r]);
    const uint4 x = *reinterpret_cast<const uint4*>(sk + r * PK + c);
    const u32 in[4] = {x.x, x.y, x.z, x.w};
    u32 out[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      out[q] = pack2<Cfg::E>(to_f32<Cfg::E>(u16(in[q] & 0xffffu)) * w, to_f32<Cfg::E>(u16(in[q] >> 16)) * w);
    *reinterpret_cast<uint4*>(kw + r * PK + c) = make_uint4(out[0], out[1], out[2], out[3]);
  }
}

// S = exp(G_C) S + kw^T v over the chunk's 64 steps.
template <class Cfg, int PK, int PV>
__device__ __forceinline__ void recurrent_chunk_update(float (&S)[kChunkStateTiles<Cfg>][4][4], const u16* kw,
                                                       const u16* sv, const float* G) {
  constexpr Elem E = Cfg::E;
  const int warp = threadIdx.x / 32;
  const float decay = expf(G[kRecurrentChunk - 1]);
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<Cfg>; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) S[mt][nt][x] *= decay;
#pragma unroll
  for (int kb = 0; kb < kRecurrentChunk / 16; ++kb) {
    u32 b[2][4];
    frag_b_kn(b[0], sv, PV, kb * 16, 0);
    frag_b_kn(b[1], sv, PV, kb * 16, 16);
#pragma unroll
    for (int mt = 0; mt < kChunkStateTiles<Cfg>; ++mt) {
      u32 a[4];
      frag_a_t(a, kw, PK, warp * (Cfg::kK / 4) + mt * 16, kb * 16);
#pragma unroll
      for (int vp = 0; vp < 2; ++vp) {
        mma_16816<E>(S[mt][2 * vp], a, b[vp][0], b[vp][1]);
        mma_16816<E>(S[mt][2 * vp + 1], a, b[vp][2], b[vp][3]);
      }
    }
  }
}

// Cfg: E (bf16 or f16), kK (64 or 128), kGamma, kReverse; V is a multiple of 32 (64 or 128).
template <class Cfg> __device__ void recurrent_chunk_fwd(const RecurrentParams& p) {
  static_assert(Cfg::E != Elem::f32 && (Cfg::kK == 64 || Cfg::kK == 128), "the chunked kernel takes 16-bit K 64/128");
  constexpr int C = kRecurrentChunk, PK = int(recurrent_chunk_pitch(Cfg::kK)),
                PV = int(recurrent_chunk_pitch(kRecurrentTile));
  extern __shared__ __align__(16) unsigned char recurrent_chunk_smem[];
  u16* const sq = reinterpret_cast<u16*>(recurrent_chunk_smem);
  u16* const sk = sq + 2 * C * PK;
  u16* const sv = sk + 2 * C * PK;
  u16* const kw = sv + 2 * C * PV;
  u16* const ss = kw + C * PK;
  float* const G = reinterpret_cast<float*>(recurrent_chunk_smem + recurrent_chunk_halves(Cfg::kK) * 2);

  const RecurrentUnit u = recurrent_unit(p);
  const i64 len = u.sp.end - u.sp.begin, chunks = ceil_div<i64>(len, C);
  const bool vec = recurrent_chunk_vec(p.q) && recurrent_chunk_vec(p.k) && recurrent_chunk_vec(p.v);
  const float log_decay = Cfg::kGamma ? p.g_gamma[u.h] : 0.0f;

  float S[kChunkStateTiles<Cfg>][4][4] = {};
  if (p.h0 != nullptr) recurrent_chunk_state_io<Cfg>(S, const_cast<float*>(p.h0), p, u, true);
  recurrent_chunk_put_state<Cfg, PV>(ss, S);

  auto load = [&](i64 c) {
    const int st = int(c & 1), rows = int(min_of<i64>(C, len - c * C));
    recurrent_chunk_load<Cfg, Cfg::kK, PK>(sq + st * C * PK, p, p.q, u, c * C, rows, 0, vec);
    recurrent_chunk_load<Cfg, Cfg::kK, PK>(sk + st * C * PK, p, p.k, u, c * C, rows, 0, vec);
    recurrent_chunk_load<Cfg, kRecurrentTile, PV>(sv + st * C * PV, p, p.v, u, c * C, rows, u.c0, vec);
  };
  if (chunks > 0) load(0);
  cp_async_commit();
  for (i64 c = 0; c < chunks; ++c) {
    const int st = int(c & 1), rows = int(min_of<i64>(C, len - c * C));
    if (c + 1 < chunks) load(c + 1);
    cp_async_commit();  // possibly empty: the wait below then always leaves one group in flight
    cp_async_wait<1>();
    if (threadIdx.x < 32) recurrent_chunk_decays(G, log_decay, rows);
    __syncthreads();  // this chunk's operands, G and the state tile are visible
    const u16 *q = sq + st * C * PK, *k = sk + st * C * PK, *v = sv + st * C * PV;
    recurrent_chunk_outputs<Cfg, PK, PV>(p, u, q, k, v, ss, G, c * C, rows);
    recurrent_chunk_decay_keys<Cfg, PK>(kw, k, G);
    __syncthreads();  // kw written; every read of the old state tile done
    recurrent_chunk_update<Cfg, PK, PV>(S, kw, v, G);
    recurrent_chunk_put_state<Cfg, PV>(ss, S);
    __syncthreads();  // the stage, kw and G are free for the next chunk
  }
  if (p.ht != nullptr) recurrent_chunk_state_io<Cfg>(S, p.ht, p, u, false);
}

// The forward entry: the key decides between the chunked kernel and the token kernel.
template <class Cfg> __device__ void recurrent_fwd_entry(const RecurrentParams& p) {
  if constexpr (Cfg::kChunked) recurrent_chunk_fwd<Cfg>(p);
  else recurrent_fwd<Cfg>(p);
}

}  // namespace ejk::cuda
