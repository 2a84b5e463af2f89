// CUDA selective scan (Mamba-1), forward and backward (semantics: common/ssm1_params.h).
//
// One block of kSsm1Threads threads per (sequence, tile of kSsm1Threads channels), blockIdx.x =
// sequence * tiles + tile; thread t owns channel tile * kSsm1Threads + t and its N state
// entries in registers. B and C are shared by every channel: the block stages kSsm1Stage tokens
// of them in shared memory at a time.
//
// Backward, phase 0: a forward pass stores each thread's state before every C-th token in the
// workspace; then chunk by chunk from the last the chunk's states are recomputed there and dh is
// carried back. dB and dC of a token sum over the block's channels (warp shuffles, then shared
// memory) into f32 partials per tile; dA and dD accumulate in registers into a share per
// sequence. Phase 1 adds the partials in tile order and the shares in sequence order.
// Varlen: a block walks its sequence's span of the packed tokens; the checkpoints are placed by
// token position (common/ssm1_params.h, ssm1_cuda_slots), the partials by packed token.
#pragma once
#include "ejk/kernels/common/ssm1_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> __device__ __forceinline__ float ssm1_read(const Ssm1Tokens& t, i64 s, i64 i, i64 c) {
  const i64 at = ssm1_at(t, s, i) + c;
  if constexpr (E == Elem::f32) return static_cast<const float*>(t.data)[at];
  else return to_f32<E>(static_cast<const u16*>(t.data)[at]);
}

template <Elem E> __device__ __forceinline__ void ssm1_write(const Ssm1Tokens& t, i64 s, i64 i, i64 c, float x) {
  if (t.data == nullptr) return;
  const i64 at = ssm1_at(t, s, i) + c;
  if constexpr (E == Elem::f32) static_cast<float*>(t.data)[at] = x;
  else static_cast<u16*>(t.data)[at] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

__device__ __forceinline__ float ssm1_expf(float x) { return expf(x); }

// Cfg: E, kN, kGate.
template <class Cfg> struct Ssm1Smem {
  float b[kSsm1Stage][Cfg::kN], c[kSsm1Stage][Cfg::kN];
  float red[kSsm1Threads / 32][2 * Cfg::kN];
};

// Tokens [i0, i0 + count) of B and C; the caller syncs around it.
template <class Cfg>
__device__ __forceinline__ void ssm1_stage(const Ssm1Params& p, Ssm1Smem<Cfg>& sm, i64 s, i64 i0, int count) {
  for (int e = threadIdx.x; e < count * Cfg::kN; e += kSsm1Threads) {
    const int t = e / Cfg::kN, j = e % Cfg::kN;
    sm.b[t][j] = ssm1_read<Cfg::E>(p.B, s, i0 + t, j);
    sm.c[t][j] = ssm1_read<Cfg::E>(p.C, s, i0 + t, j);
  }
}

// This block's sequence and this thread's channel.
struct Ssm1Unit {
  i64 s, tile, ch;
  bool active;
};
__device__ __forceinline__ Ssm1Unit ssm1_unit(const Ssm1Params& p) {
  const i64 s = blockIdx.x / p.tiles, tile = blockIdx.x % p.tiles, ch = tile * kSsm1Threads + threadIdx.x;
  return {s, tile, ch, ch < p.dim};
}

// One token's step of this thread's state; x and dt already read.
template <class Cfg>
__device__ __forceinline__ void ssm1_step(float (&h)[Cfg::kN], const float (&A)[Cfg::kN], const float* b, float x,
                                          float dt) {
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) h[j] = ssm1_update(h[j], ssm1_expf(A[j] * dt), dt * x, b[j]);
}

template <class Cfg>
__device__ __forceinline__ void ssm1_load_row(float (&h)[Cfg::kN], const float* src, const Ssm1Unit& u, i64 n) {
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) h[j] = src != nullptr && u.active ? src[u.ch * n + j] : 0.0f;
}

// Forward: a stage's B and C double-buffered in shared memory and its x, dt and gate in
// registers, the next stage's loads issued before the current stage's steps, so a thread waits
// on memory once per stage rather than once per token (a thread's tokens are sequential, and
// one thread per channel leaves few warps per SM to hide a load's latency).
template <class Cfg> struct Ssm1Fwd {
  static constexpr int kStage = Cfg::kN <= 32 ? 16 : 2;  // larger states fill the registers
  static constexpr int kBcPer = (kStage * Cfg::kN + kSsm1Threads - 1) / kSsm1Threads;  // B (and C) elements per thread
  struct Smem {
    float b[2][kStage][Cfg::kN], c[2][kStage][Cfg::kN];
  };
  struct Regs {
    float x[kStage], dt[kStage], g[kStage], b[kBcPer], c[kBcPer];
  };
};

// Tokens [i0, i0 + count) of this thread's channel and its share of B and C into registers.
template <class Cfg>
__device__ __forceinline__ void ssm1_fwd_fetch(const Ssm1Params& p, const Ssm1Unit& u, i64 i0, int count,
                                               typename Ssm1Fwd<Cfg>::Regs& r) {
  using F = Ssm1Fwd<Cfg>;
#pragma unroll
  for (int t = 0; t < F::kStage; ++t) {
    const bool in = t < count && u.active;
    r.x[t] = in ? ssm1_read<Cfg::E>(p.x, u.s, i0 + t, u.ch) : 0.0f;
    r.dt[t] = in ? ssm1_read<Cfg::E>(p.dt, u.s, i0 + t, u.ch) : 0.0f;
    if constexpr (Cfg::kGate) r.g[t] = in ? ssm1_read<Cfg::E>(p.gate, u.s, i0 + t, u.ch) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < F::kBcPer; ++k) {
    const int e = k * kSsm1Threads + threadIdx.x, t = e / Cfg::kN, j = e % Cfg::kN;
    const bool in = e < F::kStage * Cfg::kN && t < count;
    r.b[k] = in ? ssm1_read<Cfg::E>(p.B, u.s, i0 + t, j) : 0.0f;
    r.c[k] = in ? ssm1_read<Cfg::E>(p.C, u.s, i0 + t, j) : 0.0f;
  }
}

template <class Cfg>
__device__ __forceinline__ void ssm1_fwd_put(typename Ssm1Fwd<Cfg>::Smem& sm, int buf,
                                             const typename Ssm1Fwd<Cfg>::Regs& r) {
  using F = Ssm1Fwd<Cfg>;
#pragma unroll
  for (int k = 0; k < F::kBcPer; ++k) {
    const int e = k * kSsm1Threads + threadIdx.x;
    if (e < F::kStage * Cfg::kN) sm.b[buf][e / Cfg::kN][e % Cfg::kN] = r.b[k], sm.c[buf][e / Cfg::kN][e % Cfg::kN] = r.c[k];
  }
}

template <class Cfg> __device__ void ssm1_fwd(const Ssm1Params& p) {
  using F = Ssm1Fwd<Cfg>;
  constexpr int N = Cfg::kN;
  __shared__ typename F::Smem sm;
  const Ssm1Unit u = ssm1_unit(p);
  const i64 state = u.s * p.dim * N;
  float h[N], A[N];
  ssm1_load_row<Cfg>(h, p.h0 != nullptr ? p.h0 + state : nullptr, u, N);
  ssm1_load_row<Cfg>(A, p.A, u, N);
  const float D = u.active ? p.D[u.ch] : 0.0f;
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, u.s);
  typename F::Regs cur, next;
  ssm1_fwd_fetch<Cfg>(p, u, sp.begin, int(min_of((i64)F::kStage, sp.end - sp.begin)), cur);
  ssm1_fwd_put<Cfg>(sm, 0, cur);
  __syncthreads();
  int buf = 0;
  for (i64 i0 = sp.begin; i0 < sp.end; i0 += F::kStage, buf ^= 1) {
    const int count = int(min_of((i64)F::kStage, sp.end - i0));
    const i64 n0 = i0 + F::kStage;
    if (n0 < sp.end) ssm1_fwd_fetch<Cfg>(p, u, n0, int(min_of((i64)F::kStage, sp.end - n0)), next);
#pragma unroll
    for (int t = 0; t < F::kStage; ++t) {
      if (t >= count || !u.active) break;
      const float x = cur.x[t];
      ssm1_step<Cfg>(h, A, sm.b[buf][t], x, cur.dt[t]);
      float y = D * x;
#pragma unroll
      for (int j = 0; j < N; ++j) y += h[j] * sm.c[buf][t][j];
      if constexpr (Cfg::kGate) y *= cur.g[t] * ssm1_sigmoid(cur.g[t], ssm1_expf);
      ssm1_write<Cfg::E>(p.y, u.s, i0 + t, u.ch, y);
    }
    if (n0 < sp.end) {
      ssm1_fwd_put<Cfg>(sm, buf ^ 1, next);
      cur = next;
    }
    __syncthreads();
  }
  if (p.ht != nullptr && u.active)
#pragma unroll
    for (int j = 0; j < N; ++j) p.ht[state + u.ch * N + j] = h[j];
}

__device__ __forceinline__ float ssm1_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The workspace, [slot][j][unit]: chunk state c of this thread's unit is slot chunks_cap + c.
// Dense, checkpoint k is slot k; varlen, the first chunks_cap slots hold the checkpoints by
// token position, [slot][j][channel] (common/ssm1_params.h), the sequence's k-th at first + k
// (first = begin / C + s). Addresses come from the params each time, not per-thread pointers
// (registers).
__device__ __forceinline__ float* ssm1_slot(const Ssm1Params& p, const Ssm1Unit& u, i64 slot) {
  return p.work + slot * p.nstate * p.batch * p.dim + u.s * p.dim + u.ch;
}
__device__ __forceinline__ float* ssm1_ckpt(const Ssm1Params& p, const Ssm1Unit& u, i64 first, i64 k) {
  if (p.cu_seqlens == nullptr) return ssm1_slot(p, u, k);
  return p.work + (first + k) * p.nstate * p.dim + u.ch;
}
__device__ __forceinline__ i64 ssm1_ckpt_stride(const Ssm1Params& p) {
  return (p.cu_seqlens == nullptr ? p.batch : 1) * p.dim;
}

template <class Cfg>
__device__ __forceinline__ void ssm1_store_slot(float* base, i64 stride, const Ssm1Unit& u,
                                                const float (&h)[Cfg::kN]) {
  if (!u.active) return;
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) base[j * stride] = h[j];
}

template <class Cfg>
__device__ __forceinline__ void ssm1_load_slot(const float* base, i64 stride, const Ssm1Unit& u,
                                               float (&h)[Cfg::kN]) {
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) h[j] = u.active ? base[j * stride] : 0.0f;
}

// Block sums of this token's dB and dC contributions into the tile's partial row.
template <class Cfg>
__device__ __forceinline__ void ssm1_block_sum(const Ssm1Params& p, Ssm1Smem<Cfg>& sm, const Ssm1Unit& u, i64 i,
                                               const float (&db)[Cfg::kN], const float (&dc)[Cfg::kN]) {
  constexpr int N = Cfg::kN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const float sb = ssm1_warp_sum(db[j]), sc = ssm1_warp_sum(dc[j]);
    if (lane == 0) sm.red[warp][j] = sb, sm.red[warp][N + j] = sc;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < 2 * N; r += kSsm1Threads) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kSsm1Threads / 32; ++w) acc += sm.red[w][r];
    const i64 rows = ssm1_packs(p.cu_seqlens, p.batch) * p.seqlen;
    p.partial[(u.tile * rows + ssm1_row(p.cu_seqlens, p.seqlen, u.s, i)) * 2 * N + r] = acc;
  }
  __syncthreads();
}

template <class Cfg> __device__ void ssm1_bwd_sweep(const Ssm1Params& p) {
  constexpr int N = Cfg::kN;
  constexpr Elem E = Cfg::E;
  __shared__ Ssm1Smem<Cfg> sm;
  const Ssm1Unit u = ssm1_unit(p);
  const i64 state = u.s * p.dim * N;
  float h[N], A[N];
  ssm1_load_row<Cfg>(h, p.h0 != nullptr ? p.h0 + state : nullptr, u, N);
  ssm1_load_row<Cfg>(A, p.A, u, N);
  const float D = u.active ? p.D[u.ch] : 0.0f;
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, u.s);
  const i64 first = sp.begin / p.chunk + u.s, units = p.batch * p.dim;
  // The forward pass: checkpoints before the sequence's tokens 0, C, 2C, ...
  for (i64 i0 = sp.begin; i0 < sp.end; i0 += kSsm1Stage) {
    const int count = int(min_of((i64)kSsm1Stage, sp.end - i0));
    __syncthreads();
    ssm1_stage<Cfg>(p, sm, u.s, i0, count);
    __syncthreads();
    for (int t = 0; t < count && u.active; ++t) {
      const i64 i = i0 + t;
      if ((i - sp.begin) % p.chunk == 0)
        ssm1_store_slot<Cfg>(ssm1_ckpt(p, u, first, (i - sp.begin) / p.chunk), ssm1_ckpt_stride(p), u, h);
      ssm1_step<Cfg>(h, A, sm.b[t], ssm1_read<E>(p.x, u.s, i, u.ch), ssm1_read<E>(p.dt, u.s, i, u.ch));
    }
  }
  float dh[N], dA[N], dD = 0.0f;
  ssm1_load_row<Cfg>(dh, p.dht != nullptr ? p.dht + state : nullptr, u, N);
#pragma unroll
  for (int j = 0; j < N; ++j) dA[j] = 0.0f;
  for (i64 k = ceil_div(sp.end - sp.begin, p.chunk) - 1; k >= 0; --k) {
    const i64 n0 = sp.begin + k * p.chunk, n1 = min_of(sp.end, n0 + p.chunk);
    // Recompute the chunk's states after each token into chunk slots i - n0.
    ssm1_load_slot<Cfg>(ssm1_ckpt(p, u, first, k), ssm1_ckpt_stride(p), u, h);
    for (i64 i0 = n0; i0 < n1; i0 += kSsm1Stage) {
      const int count = int(min_of((i64)kSsm1Stage, n1 - i0));
      __syncthreads();
      ssm1_stage<Cfg>(p, sm, u.s, i0, count);
      __syncthreads();
      for (int t = 0; t < count && u.active; ++t) {
        const i64 i = i0 + t;
        ssm1_step<Cfg>(h, A, sm.b[t], ssm1_read<E>(p.x, u.s, i, u.ch), ssm1_read<E>(p.dt, u.s, i, u.ch));
        ssm1_store_slot<Cfg>(ssm1_slot(p, u, p.chunks_cap + (i - n0)), units, u, h);
      }
    }
    // Walk back through the chunk, kSsm1Stage tokens staged at a time.
    for (i64 hi = n1; hi > n0;) {
      const i64 lo = max_of(n0, hi - kSsm1Stage);
      __syncthreads();
      ssm1_stage<Cfg>(p, sm, u.s, lo, int(hi - lo));
      __syncthreads();
      for (i64 i = hi - 1; i >= lo; --i) {
        const float* b = sm.b[i - lo];
        const float* c = sm.c[i - lo];
        float cur[N], prev[N], db[N], dc[N];
        ssm1_load_slot<Cfg>(ssm1_slot(p, u, p.chunks_cap + (i - n0)), units, u, cur);
        const bool at_ckpt = i == n0;  // the state before the chunk's first token is its checkpoint
        ssm1_load_slot<Cfg>(at_ckpt ? ssm1_ckpt(p, u, first, k) : ssm1_slot(p, u, p.chunks_cap + (i - n0 - 1)),
                            at_ckpt ? ssm1_ckpt_stride(p) : units, u, prev);
        float x = 0.0f, dt = 0.0f, dout = 0.0f;
        if (u.active)
          x = ssm1_read<E>(p.x, u.s, i, u.ch), dt = ssm1_read<E>(p.dt, u.s, i, u.ch), dout = ssm1_read<E>(p.d_y, u.s, i, u.ch);
        float gy = dout;
        if constexpr (Cfg::kGate) {
          float y = D * x;
#pragma unroll
          for (int j = 0; j < N; ++j) y += cur[j] * c[j];
          const float g = u.active ? ssm1_read<E>(p.gate, u.s, i, u.ch) : 0.0f, sig = ssm1_sigmoid(g, ssm1_expf);
          gy = dout * g * sig;
          if (u.active) ssm1_write<E>(p.dgate, u.s, i, u.ch, dout * y * ssm1_silu_grad(g, sig));
        } else if (u.active) {
          ssm1_write<E>(p.dgate, u.s, i, u.ch, 0.0f);  // a gate nothing reads
        }
        dD += gy * x;
        float dx = gy * D, ddt = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float dj = dh[j] + gy * c[j], a = ssm1_expf(A[j] * dt);
          dc[j] = gy * cur[j];
          ddt += dj * (A[j] * a * prev[j] + x * b[j]);
          dx += dj * dt * b[j];
          dA[j] += dj * a * dt * prev[j];
          db[j] = dj * dt * x;
          dh[j] = dj * a;
        }
        if (u.active) ssm1_write<E>(p.dx, u.s, i, u.ch, dx), ssm1_write<E>(p.ddt, u.s, i, u.ch, ddt);
        ssm1_block_sum<Cfg>(p, sm, u, i, db, dc);
      }
      hi = lo;
    }
  }
  if (!u.active) return;
  if (p.dh0 != nullptr)
#pragma unroll
    for (int j = 0; j < N; ++j) p.dh0[state + u.ch * N + j] = dh[j];
  const i64 packs = ssm1_packs(p.cu_seqlens, p.batch);
  float* share = p.partial + ssm1_cuda_bc_floats(p.tiles, packs, p.seqlen, N) + u.s * p.dim * (N + 1);
#pragma unroll
  for (int j = 0; j < N; ++j) share[u.ch * N + j] = dA[j];
  share[p.dim * N + u.ch] = dD;
}

// Phase 1: a thread per element of dB and dC (summing the tiles), then of dA and dD (summing
// the sequences).
template <class Cfg> __device__ void ssm1_bwd_sum(const Ssm1Params& p) {
  constexpr int N = Cfg::kN;
  const i64 e = i64(blockIdx.x) * kSsm1Threads + threadIdx.x;
  // Varlen: one pack of seqlen tokens, s = 0 (the token tensors' sb is 0).
  const i64 packs = ssm1_packs(p.cu_seqlens, p.batch);
  const i64 rows = packs * p.seqlen * 2 * N, per = p.dim * (N + 1);
  if (e < rows) {
    float acc = 0.0f;
    for (i64 t = 0; t < p.tiles; ++t) acc += p.partial[t * rows + e];
    const i64 token = e / (2 * N), r = e % (2 * N), s = token / p.seqlen, i = token % p.seqlen;
    if (r < N) ssm1_write<Cfg::E>(p.dB, s, i, r, acc);
    else ssm1_write<Cfg::E>(p.dC, s, i, r - N, acc);
    return;
  }
  const i64 f = e - rows;
  if (f >= per) return;
  const float* shares = p.partial + ssm1_cuda_bc_floats(p.tiles, packs, p.seqlen, N);
  float acc = 0.0f;
  for (i64 s = 0; s < p.batch; ++s) acc += shares[s * per + f];
  if (f < p.dim * N) {
    if (p.dA != nullptr) p.dA[f] = acc;
  } else if (p.dD != nullptr) {
    p.dD[f - p.dim * N] = acc;
  }
}

template <class Cfg> __device__ void ssm1_bwd(const Ssm1Params& p) {
  if (p.phase == 0) ssm1_bwd_sweep<Cfg>(p);
  else ssm1_bwd_sum<Cfg>(p);
}

}  // namespace ejk::cuda
