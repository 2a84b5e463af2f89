// CUDA gated delta rule, backward (semantics: common/delta_params.h; layout: cuda/delta.cuh).
//
// Phase 0: one block per (sequence, head, tile of 32 state columns), laid out as the forward. A
// forward pass stores the state before every C-th token in the block's workspace; then chunk by
// chunk from the last the states before each of the chunk's tokens are recomputed there and
// D = dL/dS (registers) is carried back through them. dv is the tile's own and written
// directly; dq, dk (before the L2 normalization's backward), dbeta and d log a sum over every
// tile, so each tile writes f32 partials. Phase 1: a warp per (token, head) adds them in tile
// order (deterministic), applies the normalization's backward and writes the gradients.
#pragma once
#include "ejk/kernels/cuda/delta.cuh"

namespace ejk::cuda {

template <class Cfg> struct DeltaBwdSmem {
  DeltaSmem<Cfg> f;
  float d_o[kDeltaTile];
  float red[kDeltaWarps][kDeltaTile];
  float wsum[2][kDeltaWarps];
  int live;  // the decay was not clamped and no segment starts here
};

__device__ __forceinline__ float* delta_partial(const DeltaParams& p, i64 tile, i64 token, i64 h) {
  return p.partial + ((tile * p.sequences * p.seqlen + token) * p.heads + h) * delta_cuda_partial_floats(p.dk_);
}

// u = P^T k summed over the block (P: this thread's prior entries), then d = beta (v - u).
template <class Cfg>
__device__ __forceinline__ float delta_block_d(DeltaSmem<Cfg>& sm, const float (&P)[kDeltaRows<Cfg>], float* u_out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float part = 0.0f;
#pragma unroll
  for (int m = 0; m < kDeltaRows<Cfg>; ++m) {
    const int r = warp + m * kDeltaWarps;
    if (r < Cfg::kK) part += sm.k[r] * sm.k_mul * P[m];
  }
  sm.red[0][warp][lane] = part;
  __syncthreads();
  float u = 0.0f;
#pragma unroll
  for (int w = 0; w < kDeltaWarps; ++w) u += sm.red[0][w][lane];
  *u_out = u;
  return sm.beta * (sm.v[lane] - u);
}

// Stages token i (and its do) and the norms: two barriers.
template <class Cfg>
__device__ __forceinline__ void delta_bwd_stage(const DeltaParams& p, DeltaBwdSmem<Cfg>& sm, i64 s, i64 i, i64 h,
                                                i64 c0, int ncols, bool with_do) {
  delta_stage<Cfg>(p, sm.f, s, i, h, c0, ncols);
  const int j = threadIdx.x;
  if (with_do && j < kDeltaTile)
    sm.d_o[j] = j < ncols ? delta_read<Cfg::E>(p.d_o.data, delta_at(p.d_o, s, i, h) + c0 + j) : 0.0f;
  __syncthreads();
  delta_norms<Cfg>(p, sm.f);
  __syncthreads();
}

template <class Cfg> __device__ void delta_bwd_sweep(const DeltaParams& p) {
  __shared__ DeltaBwdSmem<Cfg> sm;
  constexpr int R = kDeltaRows<Cfg>;
  const i64 unit = blockIdx.x, tile = unit % p.v_tiles, h = unit / p.v_tiles % p.heads, s = unit / (p.v_tiles * p.heads);
  const i64 c0 = tile * kDeltaTile;
  const int ncols = int(min_of((i64)kDeltaTile, p.dv_ - c0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const i64 base = delta_state_at(p, s, h) + c0 + lane;
  const i64 slot = (i64)Cfg::kK * kDeltaTile;  // floats of one [K][32] state
  float* ckpt = p.work + unit * delta_cuda_block_floats(Cfg::kK, p.chunks_cap, p.chunk);
  float* states = ckpt + p.chunks_cap * slot;
  auto at = [&](int m) { return (warp + m * kDeltaWarps) * kDeltaTile + lane; };
  float S[R], D[R], P[R];
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int r = warp + m * kDeltaWarps;
    S[m] = p.h0 != nullptr && r < Cfg::kK && lane < ncols ? p.h0[base + r * p.dv_] : 0.0f;
    D[m] = p.dht != nullptr && r < Cfg::kK && lane < ncols ? p.dht[base + r * p.dv_] : 0.0f;
  }
  const i64 len = p.seqlen, chunks = ceil_div(len, p.chunk);
  float u;
  for (i64 i = 0; i < len; ++i) {
    if (i % p.chunk == 0)
#pragma unroll
      for (int m = 0; m < R; ++m) if (warp + m * kDeltaWarps < Cfg::kK) ckpt[i / p.chunk * slot + at(m)] = S[m];
    delta_bwd_stage<Cfg>(p, sm, s, i, h, c0, ncols, false);
#pragma unroll
    for (int m = 0; m < R; ++m) P[m] = S[m] * sm.f.a;
    const float d = delta_block_d<Cfg>(sm.f, P, &u);
#pragma unroll
    for (int m = 0; m < R; ++m) {
      const int r = warp + m * kDeltaWarps;
      S[m] = r < Cfg::kK ? delta_update(P[m], sm.f.k[r] * sm.f.k_mul, d) : 0.0f;
    }
    __syncthreads();  // red is rewritten by the next token
  }
  for (i64 c = chunks - 1; c >= 0; --c) {
    const i64 n0 = c * p.chunk, n1 = min_of(len, n0 + p.chunk);
#pragma unroll
    for (int m = 0; m < R; ++m) S[m] = warp + m * kDeltaWarps < Cfg::kK ? ckpt[c * slot + at(m)] : 0.0f;
    for (i64 i = n0; i < n1; ++i) {  // states[i - n0]: the state before token i
#pragma unroll
      for (int m = 0; m < R; ++m) if (warp + m * kDeltaWarps < Cfg::kK) states[(i - n0) * slot + at(m)] = S[m];
      delta_bwd_stage<Cfg>(p, sm, s, i, h, c0, ncols, false);
#pragma unroll
      for (int m = 0; m < R; ++m) P[m] = S[m] * sm.f.a;
      const float d = delta_block_d<Cfg>(sm.f, P, &u);
#pragma unroll
      for (int m = 0; m < R; ++m) {
        const int r = warp + m * kDeltaWarps;
        S[m] = r < Cfg::kK ? delta_update(P[m], sm.f.k[r] * sm.f.k_mul, d) : 0.0f;
      }
      __syncthreads();
    }
    for (i64 i = n1 - 1; i >= n0; --i) {
      delta_bwd_stage<Cfg>(p, sm, s, i, h, c0, ncols, true);
      const DeltaSmem<Cfg>& f = sm.f;
      const float a = f.a, km = f.k_mul, qm = f.q_mul;
#pragma unroll
      for (int m = 0; m < R; ++m) P[m] = warp + m * kDeltaWarps < Cfg::kK ? states[(i - n0) * slot + at(m)] * a : 0.0f;
      const float d = delta_block_d<Cfg>(sm.f, P, &u);
      const float dj = sm.d_o[lane];
      float* part = delta_partial(p, tile, s * p.seqlen + i, h);
      float dd_part = 0.0f;
#pragma unroll
      for (int m = 0; m < R; ++m) {
        const int r = warp + m * kDeltaWarps;
        if (r >= Cfg::kK) continue;
        const float S_after = delta_update(P[m], f.k[r] * km, d);
        D[m] += f.q[r] * qm * dj;
        const float sq = delta_warp_sum(dj * S_after);  // dq_r over this tile's columns, times 1/scale
        if (lane == 0) part[r] = sq * p.scale;
        dd_part += f.k[r] * km * D[m];
      }
      sm.red[warp][lane] = dd_part;
      __syncthreads();
      float dd = 0.0f;
#pragma unroll
      for (int w = 0; w < kDeltaWarps; ++w) dd += sm.red[w][lane];
      const float du = -f.beta * dd;
      if (p.dv.data && warp == 0 && lane < ncols) delta_write<Cfg::E>(p.dv.data, delta_at(p.dv, s, i, h) + c0 + lane, f.beta * dd);
      float dlog = 0.0f;
#pragma unroll
      for (int m = 0; m < R; ++m) {
        const int r = warp + m * kDeltaWarps;
        if (r >= Cfg::kK) continue;
        const float kr = f.k[r] * km, dp = D[m] + kr * du;
        const float sk = delta_warp_sum(D[m] * d + P[m] * du);
        if (lane == 0) part[Cfg::kK + r] = sk;
        dlog += dp * P[m];
        D[m] = a * dp;
      }
      dlog = delta_warp_sum(dlog);
      const float db = delta_warp_sum(dd * (f.v[lane] - u));
      if (lane == 0) sm.wsum[0][warp] = dlog, sm.wsum[1][warp] = db;
      __syncthreads();
      if (threadIdx.x == 0) {
        float sl = 0.0f;
        for (int w = 0; w < kDeltaWarps; ++w) sl += sm.wsum[0][w];
        part[2 * Cfg::kK] = sm.wsum[1][0];  // every warp holds the same sum over the tile's columns
        part[2 * Cfg::kK + 1] = sl;
      }
    }
  }
  if (p.dh0 == nullptr) return;
#pragma unroll
  for (int m = 0; m < R; ++m) {
    const int r = warp + m * kDeltaWarps;
    if (r < Cfg::kK && lane < ncols) p.dh0[base + r * p.dv_] = D[m];
  }
}

// dy (kN values per lane, rows lane + 32 n) through y = x / sqrt(sum x^2 + eps): in place.
template <int kN>
__device__ __forceinline__ void delta_warp_normalize_bwd(float (&dy)[kN], const float (&x)[kN], bool on) {
  if (!on) return;
  float ss = 0.0f;
#pragma unroll
  for (int n = 0; n < kN; ++n) ss += x[n] * x[n];
  const float inv = rsqrtf(delta_warp_sum(ss) + kDeltaNormEps);
  float dot = 0.0f;
#pragma unroll
  for (int n = 0; n < kN; ++n) dot += x[n] * inv * dy[n];
  dot = delta_warp_sum(dot);
#pragma unroll
  for (int n = 0; n < kN; ++n) dy[n] = inv * (dy[n] - x[n] * inv * dot);
}

template <class Cfg> __device__ void delta_bwd_sum(const DeltaParams& p) {
  constexpr int N = (Cfg::kK + 31) / 32;
  constexpr Elem E = Cfg::E;
  const i64 pair = (i64)blockIdx.x * kDeltaWarps + threadIdx.x / 32;  // (token, head)
  const int lane = threadIdx.x % 32;
  if (pair >= p.sequences * p.seqlen * p.heads) return;
  const i64 token = pair / p.heads, h = pair % p.heads, s = token / p.seqlen, i = token % p.seqlen;
  float q[N], k[N], dq[N], dk[N];
  float db = 0.0f, dl = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int r = lane + 32 * n;
    const bool in = r < Cfg::kK;
    q[n] = in ? delta_read<E>(p.q.data, delta_at(p.q, s, i, h) + r) : 0.0f;
    k[n] = in ? delta_read<E>(p.k.data, delta_at(p.k, s, i, h) + r) : 0.0f;
    dq[n] = dk[n] = 0.0f;
  }
  for (i64 t = 0; t < p.v_tiles; ++t) {
    const float* part = delta_partial(p, t, token, h);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      const int r = lane + 32 * n;
      if (r < Cfg::kK) dq[n] += part[r], dk[n] += part[Cfg::kK + r];
    }
    db += part[2 * Cfg::kK], dl += part[2 * Cfg::kK + 1];
  }
  delta_warp_normalize_bwd<N>(dq, q, p.l2norm != 0);
  delta_warp_normalize_bwd<N>(dk, k, p.l2norm != 0);
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const int r = lane + 32 * n;
    if (r >= Cfg::kK) continue;
    if (p.dq.data) delta_write<E>(p.dq.data, delta_at(p.dq, s, i, h) + r, dq[n]);
    if (p.dk.data) delta_write<E>(p.dk.data, delta_at(p.dk, s, i, h) + r, dk[n]);
  }
  if (lane != 0) return;
  if (p.dbeta.data) delta_write<E>(p.dbeta.data, delta_at(p.dbeta, s, i, h), db);
  if (p.ddecay.data) {
    bool live = true;
    if (p.decay.data) delta_log_decay(delta_read<E>(p.decay.data, delta_at(p.decay, s, i, h)), &live);
    delta_write<E>(p.ddecay.data, delta_at(p.ddecay, s, i, h), live && !delta_resets(p, s, i) ? dl : 0.0f);
  }
}

template <class Cfg> __device__ void delta_bwd(const DeltaParams& p) {
  if (p.phase == 0) delta_bwd_sweep<Cfg>(p);
  else delta_bwd_sum<Cfg>(p);
}

}  // namespace ejk::cuda
