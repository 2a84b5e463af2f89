// CUDA gated delta rule, forward (semantics: common/delta_params.h).
//
// One block of kDeltaThreads threads per (sequence, head, tile of 32 state columns), the unit
// index blockIdx.x (tile fastest): the columns of S evolve independently. Warp w holds rows
// w, w + 8, ... of the tile's f32 state in registers, lane j column j. Per token the block
// stages q, k (K values), beta, the decay and the tile's v in shared memory; warps 0 and 1 take
// the norms of q and k; then u = P^T k and o = S^T q are summed across warps through shared
// memory: four barriers per token.
#pragma once
#include "ejk/kernels/common/delta_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> __device__ __forceinline__ float delta_read(const void* base, i64 at) {
  if constexpr (E == Elem::f32) return static_cast<const float*>(base)[at];
  else return to_f32<E>(static_cast<const u16*>(base)[at]);
}

template <Elem E> __device__ __forceinline__ void delta_write(void* base, i64 at, float x) {
  if constexpr (E == Elem::f32) static_cast<float*>(base)[at] = x;
  else static_cast<u16*>(base)[at] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

// Cfg: E, kK.
template <class Cfg> constexpr int kDeltaRows = (Cfg::kK + kDeltaWarps - 1) / kDeltaWarps;

template <class Cfg> struct DeltaSmem {
  float q[Cfg::kK], k[Cfg::kK], v[kDeltaTile];
  float beta, a, q_mul, k_mul;  // a: 0 where a segment starts; q_mul includes the scale
  float red[2][kDeltaWarps][kDeltaTile];
};

__device__ __forceinline__ float delta_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Stages token i's operands; the norms follow after a barrier (delta_norms).
template <class Cfg>
__device__ __forceinline__ void delta_stage(const DeltaParams& p, DeltaSmem<Cfg>& sm, i64 s, i64 i, i64 h, i64 c0,
                                            int ncols) {
  constexpr Elem E = Cfg::E;
  for (int r = threadIdx.x; r < Cfg::kK; r += kDeltaThreads) {
    sm.q[r] = delta_read<E>(p.q.data, delta_at(p.q, s, i, h) + r);
    sm.k[r] = delta_read<E>(p.k.data, delta_at(p.k, s, i, h) + r);
  }
  const int j = threadIdx.x;
  if (j < kDeltaTile) sm.v[j] = j < ncols ? delta_read<E>(p.v.data, delta_at(p.v, s, i, h) + c0 + j) : 0.0f;
  if (j == kDeltaTile) {
    sm.beta = delta_read<E>(p.beta.data, delta_at(p.beta, s, i, h));
    bool live;
    const float g = p.decay.data ? delta_read<E>(p.decay.data, delta_at(p.decay, s, i, h)) : 0.0f;
    sm.a = delta_resets(p, s, i) ? 0.0f : expf(delta_log_decay(g, &live));
  }
}

// Warp 0: the multiplier of q (1 / norm times the scale); warp 1: that of k.
template <class Cfg> __device__ __forceinline__ void delta_norms(const DeltaParams& p, DeltaSmem<Cfg>& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp > 1) return;
  const float* x = warp == 0 ? sm.q : sm.k;
  float ss = 0.0f;
  for (int r = lane; r < Cfg::kK; r += 32) ss += x[r] * x[r];
  ss = delta_warp_sum(ss);
  const float inv = p.l2norm ? rsqrtf(ss + kDeltaNormEps) : 1.0f;
  if (lane == 0) {
    if (warp == 0) sm.q_mul = inv * p.scale;
    else sm.k_mul = inv;
  }
}

template <class Cfg> __device__ void delta_fwd(const DeltaParams& p) {
  __shared__ DeltaSmem<Cfg> sm;
  constexpr int R = kDeltaRows<Cfg>;
  const i64 unit = blockIdx.x, tile = unit % p.v_tiles, h = unit / p.v_tiles % p.heads, s = unit / (p.v_tiles * p.heads);
  const i64 c0 = tile * kDeltaTile;
  const int ncols = int(min_of((i64)kDeltaTile, p.dv_ - c0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 base = delta_state_at(p, s, h) + c0 + lane;
  float S[R];
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int r = warp + m * kDeltaWarps;
    S[m] = p.h0 != nullptr && r < Cfg::kK && lane < ncols ? p.h0[base + r * p.dv_] : 0.0f;
  }
  for (i64 i = 0; i < p.seqlen; ++i) {
    delta_stage<Cfg>(p, sm, s, i, h, c0, ncols);
    __syncthreads();
    delta_norms<Cfg>(p, sm);
    __syncthreads();
    const float a = sm.a, km = sm.k_mul, qm = sm.q_mul;
    float part = 0.0f;
#pragma unroll
    for (int m = 0; m < R; ++m) {
      const int r = warp + m * kDeltaWarps;
      S[m] *= a;
      if (r < Cfg::kK) part += sm.k[r] * km * S[m];
    }
    sm.red[0][warp][lane] = part;
    __syncthreads();
    float u = 0.0f;
#pragma unroll
    for (int w = 0; w < kDeltaWarps; ++w) u += sm.red[0][w][lane];
    const float d = sm.beta * (sm.v[lane] - u);
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < R; ++m) {
      const int r = warp + m * kDeltaWarps;
      if (r < Cfg::kK) {
        S[m] = delta_update(S[m], sm.k[r] * km, d);
        acc += sm.q[r] * qm * S[m];
      }
    }
    sm.red[1][warp][lane] = acc;
    __syncthreads();
    if (warp == 0) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kDeltaWarps; ++w) o += sm.red[1][w][lane];
      if (lane < ncols) delta_write<Cfg::E>(p.o.data, delta_at(p.o, s, i, h) + c0 + lane, o);
    }
  }
  if (p.ht == nullptr) return;
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int r = warp + m * kDeltaWarps;
    if (r < Cfg::kK && lane < ncols) p.ht[base + r * p.dv_] = S[m];
  }
}

}  // namespace ejk::cuda
