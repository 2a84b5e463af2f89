// CUDA recurrent attention, forward and backward (semantics: common/recurrent_params.h).
//
// One block of kRecurrentThreads threads per (sequence, head, tile of 32 state columns), the
// unit index blockIdx.x (tile fastest). Warp w holds rows w, w + 8, ... of the tile's state in
// registers, lane j column j. Per token the block stages q, k and the row decays (K values) and
// the tile's v, column decays and do (32 values) in shared memory, updates its state entries,
// and sums across warps through shared memory: two barriers per token.
//
// Backward, phase 0: a forward pass stores the state before every C-th step in the block's
// workspace; then chunk by chunk from the last the chunk's C states are recomputed there and
// D = dL/dS is carried back through them. Column sums (dv, dgv) are the tile's own and written
// directly; row sums (dq, dk, d log a) span every tile, so each tile writes f32 partials, which
// phase 1 adds in tile order (deterministic) into dq, dk, dg and dgk.
#pragma once
#include "ejk/kernels/common/recurrent_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> __device__ __forceinline__ float recurrent_read(const void* base, i64 at) {
  if constexpr (E == Elem::f32) return static_cast<const float*>(base)[at];
  else return to_f32<E>(static_cast<const u16*>(base)[at]);
}

template <Elem E> __device__ __forceinline__ void recurrent_write(void* base, i64 at, float x) {
  if constexpr (E == Elem::f32) static_cast<float*>(base)[at] = x;
  else static_cast<u16*>(base)[at] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

// Cfg: E, kK, kG, kGamma, kGk, kGv, kGh, kReverse.
template <class Cfg> constexpr int kRecurrentRows = (Cfg::kK + kRecurrentWarps - 1) / kRecurrentWarps;

// One token's operands in shared memory.
template <class Cfg> struct RecurrentSmem {
  float q[Cfg::kK], k[Cfg::kK], a[Cfg::kK];
  float v[kRecurrentTile], b[kRecurrentTile], d_o[kRecurrentTile];
  float red[2][kRecurrentWarps][kRecurrentTile];
};

// Stages token i's operands (q scaled); the caller syncs before reading them.
template <class Cfg>
__device__ __forceinline__ void recurrent_stage(const RecurrentParams& p, RecurrentSmem<Cfg>& sm, i64 s, i64 i,
                                                i64 h, i64 c0, int ncols, bool with_do) {
  constexpr Elem E = Cfg::E;
  for (int r = threadIdx.x; r < Cfg::kK; r += kRecurrentThreads) {
    sm.q[r] = recurrent_read<E>(p.q.data, recurrent_at(p, p.q, s, i, h) + r) * p.scale;
    sm.k[r] = recurrent_read<E>(p.k.data, recurrent_at(p, p.k, s, i, h) + r);
    constexpr bool head_gate = recurrent_head_gate<Cfg>();
    float log = Cfg::kGamma ? p.g_gamma[h] : 0.0f;
    if (head_gate) log += recurrent_read<E>(p.gh.data, recurrent_at(p, p.gh, s, i, h));
    if (Cfg::kG) log += recurrent_read<E>(p.g.data, recurrent_at(p, p.g, s, i, h) + r);
    if (Cfg::kGk) log += recurrent_read<E>(p.gk.data, recurrent_at(p, p.gk, s, i, h) + r);
    sm.a[r] = Cfg::kG || Cfg::kGamma || Cfg::kGk || head_gate ? expf(log) : 1.0f;
  }
  const int j = threadIdx.x;
  if (j < kRecurrentTile) {
    const bool in = j < ncols;
    sm.v[j] = in ? recurrent_read<E>(p.v.data, recurrent_at(p, p.v, s, i, h) + c0 + j) : 0.0f;
    sm.b[j] = in && Cfg::kGv ? expf(recurrent_read<E>(p.gv.data, recurrent_at(p, p.gv, s, i, h) + c0 + j)) : 1.0f;
    if (with_do) sm.d_o[j] = in ? recurrent_read<E>(p.d_o.data, recurrent_at(p, p.d_o, s, i, h) + c0 + j) : 0.0f;
  }
}

// The unit of this block: its sequence, head and tile.
struct RecurrentUnit {
  i64 s, h, c0;
  int ncols;
  RecurrentSpan sp;
};
__device__ __forceinline__ RecurrentUnit recurrent_unit(const RecurrentParams& p) {
  const i64 u = blockIdx.x, tile = u % p.v_tiles, h = u / p.v_tiles % p.heads, s = u / (p.v_tiles * p.heads);
  const i64 c0 = tile * kRecurrentTile;
  return {s, h, c0, int(min_of((i64)kRecurrentTile, p.dv_ - c0)), recurrent_span(p, s)};
}

// A thread's state entries from a [.., H, K, V] f32 state (zeros where absent or past V).
template <class Cfg>
__device__ __forceinline__ void recurrent_load_state(float (&S)[kRecurrentRows<Cfg>], const RecurrentParams& p,
                                                     const float* state, const RecurrentUnit& u) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m) {
    const int r = warp + m * kRecurrentWarps;
    S[m] = state != nullptr && r < Cfg::kK && lane < u.ncols
               ? state[recurrent_state_at(p, u.s, u.h) + r * p.dv_ + u.c0 + lane]
               : 0.0f;
  }
}

template <class Cfg>
__device__ __forceinline__ void recurrent_store_state(float* state, const float (&S)[kRecurrentRows<Cfg>],
                                                      const RecurrentParams& p, const RecurrentUnit& u) {
  if (state == nullptr) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m) {
    const int r = warp + m * kRecurrentWarps;
    if (r < Cfg::kK && lane < u.ncols) state[recurrent_state_at(p, u.s, u.h) + r * p.dv_ + u.c0 + lane] = S[m];
  }
}

template <class Cfg>
__device__ __forceinline__ void recurrent_step(float (&S)[kRecurrentRows<Cfg>], const RecurrentSmem<Cfg>& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m) {
    const int r = warp + m * kRecurrentWarps;
    if (r < Cfg::kK) S[m] = recurrent_update(S[m], sm.a[r], sm.b[lane], sm.k[r], sm.v[lane]);
  }
}

template <class Cfg> __device__ void recurrent_fwd(const RecurrentParams& p) {
  __shared__ RecurrentSmem<Cfg> sm;
  const RecurrentUnit u = recurrent_unit(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float S[kRecurrentRows<Cfg>];
  recurrent_load_state<Cfg>(S, p, p.h0, u);
  for (i64 n = 0; n < u.sp.end - u.sp.begin; ++n) {
    const i64 i = recurrent_token(u.sp, n, Cfg::kReverse);
    recurrent_stage<Cfg>(p, sm, u.s, i, u.h, u.c0, u.ncols, false);
    __syncthreads();
    recurrent_step<Cfg>(S, sm);
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < kRecurrentRows<Cfg>; ++m) {
      const int r = warp + m * kRecurrentWarps;
      if (r < Cfg::kK) acc += sm.q[r] * S[m];
    }
    sm.red[0][warp][lane] = acc;
    __syncthreads();
    if (warp == 0) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kRecurrentWarps; ++w) o += sm.red[0][w][lane];
      if (lane < u.ncols) recurrent_write<Cfg::E>(p.o.data, recurrent_at(p, p.o, u.s, i, u.h) + u.c0 + lane, o);
    }
  }
  recurrent_store_state<Cfg>(p.ht, S, p, u);
}

__device__ __forceinline__ float recurrent_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The partial row sums of (tile, token i, head h): [3][K] f32 (dq, dk, d log a).
__device__ __forceinline__ float* recurrent_partial(const RecurrentParams& p, i64 tile, i64 i, i64 h) {
  return p.partial + ((tile * p.total + i) * p.heads + h) * 3 * p.dk_;
}

// Checkpoint c of the block's unit, and state m of its current chunk: [K][32] tiles each
// (common/recurrent_params.h: recurrent_cuda_work_tiles).
template <class Cfg>
__device__ __forceinline__ float* recurrent_checkpoint(const RecurrentParams& p, const RecurrentUnit& u, i64 c) {
  const i64 slots = recurrent_cuda_slots(p.total, p.sequences, p.chunk);
  const i64 slot = (u.h * p.v_tiles + u.c0 / kRecurrentTile) * slots + u.sp.begin / p.chunk + u.s + c;
  return p.work + slot * Cfg::kK * kRecurrentTile;
}
template <class Cfg> __device__ __forceinline__ float* recurrent_chunk_state(const RecurrentParams& p, i64 m) {
  const i64 first = p.heads * p.v_tiles * recurrent_cuda_slots(p.total, p.sequences, p.chunk);
  return p.work + (first + (i64)blockIdx.x * p.chunk + m) * Cfg::kK * kRecurrentTile;
}

template <class Cfg>
__device__ __forceinline__ void recurrent_put(float* slot, const float (&S)[kRecurrentRows<Cfg>]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m)
    if (warp + m * kRecurrentWarps < Cfg::kK) slot[(warp + m * kRecurrentWarps) * kRecurrentTile + lane] = S[m];
}

template <class Cfg>
__device__ __forceinline__ void recurrent_get(float (&S)[kRecurrentRows<Cfg>], const float* slot) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m)
    S[m] = warp + m * kRecurrentWarps < Cfg::kK ? slot[(warp + m * kRecurrentWarps) * kRecurrentTile + lane] : 0.0f;
}

// One token of the reverse sweep: D (in registers) holds the gradient of the state after it.
template <class Cfg>
__device__ __forceinline__ void recurrent_bwd_token(const RecurrentParams& p, RecurrentSmem<Cfg>& sm,
                                                    const RecurrentUnit& u, i64 i, float (&D)[kRecurrentRows<Cfg>],
                                                    const float* after, const float* before) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* part = recurrent_partial(p, u.c0 / kRecurrentTile, i, u.h);
  float dv = 0.0f, dlc = 0.0f;
#pragma unroll
  for (int m = 0; m < kRecurrentRows<Cfg>; ++m) {
    const int r = warp + m * kRecurrentWarps;
    if (r >= Cfg::kK) continue;  // uniform across the warp
    const float S = after[r * kRecurrentTile + lane];
    const float prior = before[r * kRecurrentTile + lane] * sm.a[r] * sm.b[lane];
    const float d = D[m] + sm.q[r] * sm.d_o[lane];  // sm.q holds scale * q
    const float dq = recurrent_warp_sum(sm.d_o[lane] * S), dk = recurrent_warp_sum(d * sm.v[lane]);
    const float dlr = recurrent_warp_sum(d * prior);
    if (lane == 0) part[r] = p.scale * dq, part[p.dk_ + r] = dk, part[2 * p.dk_ + r] = dlr;
    dv += d * sm.k[r], dlc += d * prior;
    D[m] = recurrent_carry(d, sm.a[r], sm.b[lane]);
  }
  sm.red[0][warp][lane] = dv, sm.red[1][warp][lane] = dlc;
  __syncthreads();
  if (warp == 0 && lane < u.ncols) {
    float sv = 0.0f, sl = 0.0f;
#pragma unroll
    for (int w = 0; w < kRecurrentWarps; ++w) sv += sm.red[0][w][lane], sl += sm.red[1][w][lane];
    if (p.dv.data) recurrent_write<Cfg::E>(p.dv.data, recurrent_at(p, p.dv, u.s, i, u.h) + u.c0 + lane, sv);
    if (p.dgv.data) recurrent_write<Cfg::E>(p.dgv.data, recurrent_at(p, p.dgv, u.s, i, u.h) + u.c0 + lane, sl);
  }
}

template <class Cfg> __device__ void recurrent_bwd_sweep(const RecurrentParams& p) {
  __shared__ RecurrentSmem<Cfg> sm;
  const RecurrentUnit u = recurrent_unit(p);
  const i64 len = u.sp.end - u.sp.begin, chunks = recurrent_chunks(p, len);
  float S[kRecurrentRows<Cfg>];
  recurrent_load_state<Cfg>(S, p, p.h0, u);
  for (i64 n = 0; n < len; ++n) {
    if (n % p.chunk == 0) recurrent_put<Cfg>(recurrent_checkpoint<Cfg>(p, u, n / p.chunk), S);
    recurrent_stage<Cfg>(p, sm, u.s, recurrent_token(u.sp, n, Cfg::kReverse), u.h, u.c0, u.ncols, false);
    __syncthreads();
    recurrent_step<Cfg>(S, sm);
    __syncthreads();
  }
  float D[kRecurrentRows<Cfg>];
  recurrent_load_state<Cfg>(D, p, p.dht, u);
  for (i64 c = chunks - 1; c >= 0; --c) {
    const i64 n0 = c * p.chunk, n1 = min_of(len, n0 + p.chunk);
    float* start = recurrent_checkpoint<Cfg>(p, u, c);
    recurrent_get<Cfg>(S, start);
    for (i64 n = n0; n < n1; ++n) {
      recurrent_stage<Cfg>(p, sm, u.s, recurrent_token(u.sp, n, Cfg::kReverse), u.h, u.c0, u.ncols, false);
      __syncthreads();
      recurrent_step<Cfg>(S, sm);
      recurrent_put<Cfg>(recurrent_chunk_state<Cfg>(p, n - n0), S);
      __syncthreads();
    }
    // Each thread reads back only the entries it wrote itself: no barrier needed for them.
    for (i64 n = n1 - 1; n >= n0; --n) {
      const i64 i = recurrent_token(u.sp, n, Cfg::kReverse);
      recurrent_stage<Cfg>(p, sm, u.s, i, u.h, u.c0, u.ncols, true);
      __syncthreads();
      const float* before = n == n0 ? start : recurrent_chunk_state<Cfg>(p, n - n0 - 1);
      recurrent_bwd_token<Cfg>(p, sm, u, i, D, recurrent_chunk_state<Cfg>(p, n - n0), before);
      __syncthreads();
    }
  }
  recurrent_store_state<Cfg>(p.dh0, D, p, u);
}

// Phase 1: one thread per (token, head, row): the tiles' partial sums in tile order.
template <class Cfg> __device__ void recurrent_bwd_sum(const RecurrentParams& p) {
  const i64 e = (i64)blockIdx.x * recurrent_bwd_threads<Cfg>() + threadIdx.x;
  if (e >= p.total * p.heads * p.dk_) return;
  const i64 r = e % p.dk_, h = e / p.dk_ % p.heads, i = e / (p.dk_ * p.heads);
  float sum[3] = {0.0f, 0.0f, 0.0f};
  for (i64 t = 0; t < p.v_tiles; ++t) {
    const float* part = recurrent_partial(p, t, i, h);
    for (int x = 0; x < 3; ++x) sum[x] += part[x * p.dk_ + r];
  }
  // The sequence of packed token i: dense tensors index by (s, t); varlen by i alone.
  const i64 s = p.cu_seqlens == nullptr ? i / p.seqlen : 0;
  auto put = [&](const RecurrentTokens& t, float x) {
    if (t.data) recurrent_write<Cfg::E>(t.data, recurrent_at(p, t, s, i, h) + r, x);
  };
  put(p.dq, sum[0]), put(p.dk, sum[1]), put(p.dg, sum[2]), put(p.dgk, sum[2]);
}

}  // namespace ejk::cuda
