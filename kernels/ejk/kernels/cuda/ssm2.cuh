// CUDA Mamba-2 scan, forward and backward (semantics: common/ssm2_params.h).
//
// One block of kSsm1Threads threads per (sequence, head, tile of kSsm1Threads head dims),
// blockIdx.x = (sequence * H + head) * tiles + tile; thread t owns head dim tile * kSsm1Threads
// + t and its N state entries in registers. The block stages its group's B and C for kSsm1Stage
// tokens at a time in shared memory.
//
// Backward: phase 0 zeroes the f32 accumulators; phase 1 runs a forward pass that stores each
// thread's state before every C-th token, then per chunk from the last recomputes the chunk's
// states and carries dh back. Per token the block sums db, dc (N each) and ddt over its head
// dims (warp shuffles, then shared memory) and adds them to the accumulators atomically, as it
// does da and dd at the end; phase 2 writes the accumulators in the outputs' dtypes.
// Varlen: a block walks its sequence's span of the packed tokens; the checkpoints are placed by
// token position (common/ssm2_params.h), the accumulators by packed token.
#pragma once
#include "ejk/kernels/common/ssm2_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> __device__ __forceinline__ float ssm2_read(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c) {
  const i64 at = ssm2_at(t, s, i, h) + c;
  if constexpr (E == Elem::f32) return static_cast<const float*>(t.data)[at];
  else return to_f32<E>(static_cast<const u16*>(t.data)[at]);
}

template <Elem E> __device__ __forceinline__ void ssm2_write(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c, float x) {
  if (t.data == nullptr) return;
  const i64 at = ssm2_at(t, s, i, h) + c;
  if constexpr (E == Elem::f32) static_cast<float*>(t.data)[at] = x;
  else static_cast<u16*>(t.data)[at] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

// Cfg: E, kN.
template <class Cfg> struct Ssm2Smem {
  float b[kSsm1Stage][Cfg::kN], c[kSsm1Stage][Cfg::kN];
  float dt[kSsm1Stage];
  float red[kSsm1Threads / 32][2 * Cfg::kN + 3];
};

struct Ssm2Unit {
  i64 s, h, g, q;
  bool active;
};
__device__ __forceinline__ Ssm2Unit ssm2_unit(const Ssm2Params& p) {
  const i64 u = blockIdx.x / p.tiles, tile = blockIdx.x % p.tiles, s = u / p.heads, h = u % p.heads;
  const i64 q = tile * kSsm1Threads + threadIdx.x;
  return {s, h, ssm2_group(p, h), q, q < p.hdim};
}

// Tokens [i0, i0 + count) of the group's B and C and the head's dt; the caller syncs around it.
template <class Cfg>
__device__ __forceinline__ void ssm2_stage(const Ssm2Params& p, Ssm2Smem<Cfg>& sm, const Ssm2Unit& u, i64 i0, int count) {
  for (int e = threadIdx.x; e < count * Cfg::kN; e += kSsm1Threads) {
    const int t = e / Cfg::kN, j = e % Cfg::kN;
    sm.b[t][j] = ssm2_read<Cfg::E>(p.B, u.s, i0 + t, u.g, j);
    sm.c[t][j] = ssm2_read<Cfg::E>(p.C, u.s, i0 + t, u.g, j);
  }
  if (threadIdx.x < count) sm.dt[threadIdx.x] = ssm2_read<Cfg::E>(p.dt, u.s, i0 + threadIdx.x, u.h, 0);
}

template <class Cfg>
__device__ __forceinline__ void ssm2_step(float (&st)[Cfg::kN], const float* b, float e, float dtx) {
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) st[j] = ssm1_update(st[j], e, dtx, b[j]);
}

template <class Cfg>
__device__ __forceinline__ void ssm2_load_row(float (&st)[Cfg::kN], const float* src, const Ssm2Params& p, const Ssm2Unit& u) {
  const i64 at = ((u.s * p.heads + u.h) * p.hdim + u.q) * Cfg::kN;
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) st[j] = src != nullptr && u.active ? src[at + j] : 0.0f;
}

template <class Cfg> __device__ void ssm2_fwd(const Ssm2Params& p) {
  constexpr int N = Cfg::kN;
  __shared__ Ssm2Smem<Cfg> sm;
  const Ssm2Unit u = ssm2_unit(p);
  float st[N];
  ssm2_load_row<Cfg>(st, p.h0, p, u);
  const float A = p.A[u.h], D = p.D[u.h];
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, u.s);
  for (i64 i0 = sp.begin; i0 < sp.end; i0 += kSsm1Stage) {
    const int count = int(min_of((i64)kSsm1Stage, sp.end - i0));
    __syncthreads();
    ssm2_stage<Cfg>(p, sm, u, i0, count);
    __syncthreads();
    if (!u.active) continue;
    for (int t = 0; t < count; ++t) {
      const i64 i = i0 + t;
      const float x = ssm2_read<Cfg::E>(p.x, u.s, i, u.h, u.q), dt = sm.dt[t];
      ssm2_step<Cfg>(st, sm.b[t], expf(A * dt), dt * x);
      float y = D * x;
#pragma unroll
      for (int j = 0; j < N; ++j) y += st[j] * sm.c[t][j];
      ssm2_write<Cfg::E>(p.y, u.s, i, u.h, u.q, y);
    }
  }
  if (p.ht != nullptr && u.active) {
    const i64 at = ((u.s * p.heads + u.h) * p.hdim + u.q) * N;
#pragma unroll
    for (int j = 0; j < N; ++j) p.ht[at + j] = st[j];
  }
}

__device__ __forceinline__ float ssm2_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The workspace, [slot][j][unit]: chunk state c of this thread's unit is slot chunks_cap + c.
// Dense, checkpoint k is slot k; varlen, the first chunks_cap slots hold the checkpoints by
// token position, [slot][j][head, head dim] (common/ssm2_params.h), the sequence's k-th at
// first + k (first = begin / C + s). Addresses come from the params each time: per-thread
// pointers would cost registers in a sweep that already spills at N = 128.
__device__ __forceinline__ float* ssm2_slot(const Ssm2Params& p, const Ssm2Unit& u, i64 slot) {
  const i64 units = p.batch * p.heads * p.hdim;
  return p.work + slot * p.nstate * units + (u.s * p.heads + u.h) * p.hdim + u.q;
}
__device__ __forceinline__ float* ssm2_ckpt(const Ssm2Params& p, const Ssm2Unit& u, i64 first, i64 k) {
  if (p.cu_seqlens == nullptr) return ssm2_slot(p, u, k);
  return p.work + (first + k) * p.nstate * p.heads * p.hdim + u.h * p.hdim + u.q;
}
__device__ __forceinline__ i64 ssm2_ckpt_stride(const Ssm2Params& p) {
  return (p.cu_seqlens == nullptr ? p.batch : 1) * p.heads * p.hdim;
}

template <class Cfg>
__device__ __forceinline__ void ssm2_store_slot(float* base, i64 stride, const Ssm2Unit& u,
                                                const float (&st)[Cfg::kN]) {
  if (!u.active) return;
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) base[j * stride] = st[j];
}

template <class Cfg>
__device__ __forceinline__ void ssm2_load_slot(const float* base, i64 stride, const Ssm2Unit& u,
                                               float (&st)[Cfg::kN]) {
#pragma unroll
  for (int j = 0; j < Cfg::kN; ++j) st[j] = u.active ? base[j * stride] : 0.0f;
}

// The accumulators' parts (ssm2_cuda_acc_floats).
struct Ssm2Acc {
  float *db, *dc, *ddt, *da, *dd;
};
__device__ __forceinline__ Ssm2Acc ssm2_acc(const Ssm2Params& p) {
  const i64 rows = ssm1_packs(p.cu_seqlens, p.batch) * p.seqlen;
  const i64 bc = rows * p.groups * p.nstate, tokens = rows * p.heads;
  float* base = p.partial;
  return {base, base + bc, base + 2 * bc, base + 2 * bc + tokens, base + 2 * bc + tokens + p.heads};
}

// Adds the block's sums of v[0, n) (n <= 2N + 3) to dst[0, n) atomically.
template <class Cfg>
__device__ __forceinline__ void ssm2_block_add(Ssm2Smem<Cfg>& sm, const float* v, int n, float* const* dst) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = 0; r < n; ++r) {
    const float x = ssm2_warp_sum(v[r]);
    if (lane == 0) sm.red[warp][r] = x;
  }
  __syncthreads();
  for (int r = threadIdx.x; r < n; r += kSsm1Threads) {
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kSsm1Threads / 32; ++w) acc += sm.red[w][r];
    if (dst[r] != nullptr) atomicAdd(dst[r], acc);
  }
  __syncthreads();
}

template <class Cfg> __device__ void ssm2_bwd_sweep(const Ssm2Params& p) {
  constexpr int N = Cfg::kN;
  constexpr Elem E = Cfg::E;
  __shared__ Ssm2Smem<Cfg> sm;
  const Ssm2Unit u = ssm2_unit(p);
  const Ssm2Acc acc = ssm2_acc(p);
  float st[N];
  ssm2_load_row<Cfg>(st, p.h0, p, u);
  const float A = p.A[u.h], D = p.D[u.h];
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, u.s);
  const i64 first = sp.begin / p.chunk + u.s, units = p.batch * p.heads * p.hdim;
  for (i64 i0 = sp.begin; i0 < sp.end; i0 += kSsm1Stage) {
    const int count = int(min_of((i64)kSsm1Stage, sp.end - i0));
    __syncthreads();
    ssm2_stage<Cfg>(p, sm, u, i0, count);
    __syncthreads();
    for (int t = 0; t < count && u.active; ++t) {
      const i64 i = i0 + t;
      if ((i - sp.begin) % p.chunk == 0)
        ssm2_store_slot<Cfg>(ssm2_ckpt(p, u, first, (i - sp.begin) / p.chunk), ssm2_ckpt_stride(p), u, st);
      const float dt = sm.dt[t];
      ssm2_step<Cfg>(st, sm.b[t], expf(A * dt), dt * ssm2_read<E>(p.x, u.s, i, u.h, u.q));
    }
  }
  float dh[N], da = 0.0f, dd = 0.0f;
  ssm2_load_row<Cfg>(dh, p.dht, p, u);
  for (i64 k = ceil_div(sp.end - sp.begin, p.chunk) - 1; k >= 0; --k) {
    const i64 n0 = sp.begin + k * p.chunk, n1 = min_of(sp.end, n0 + p.chunk);
    ssm2_load_slot<Cfg>(ssm2_ckpt(p, u, first, k), ssm2_ckpt_stride(p), u, st);
    for (i64 i0 = n0; i0 < n1; i0 += kSsm1Stage) {
      const int count = int(min_of((i64)kSsm1Stage, n1 - i0));
      __syncthreads();
      ssm2_stage<Cfg>(p, sm, u, i0, count);
      __syncthreads();
      for (int t = 0; t < count && u.active; ++t) {
        const i64 i = i0 + t;
        const float dt = sm.dt[t];
        ssm2_step<Cfg>(st, sm.b[t], expf(A * dt), dt * ssm2_read<E>(p.x, u.s, i, u.h, u.q));
        ssm2_store_slot<Cfg>(ssm2_slot(p, u, p.chunks_cap + (i - n0)), units, u, st);
      }
    }
    for (i64 hi = n1; hi > n0;) {
      const i64 lo = max_of(n0, hi - kSsm1Stage);
      __syncthreads();
      ssm2_stage<Cfg>(p, sm, u, lo, int(hi - lo));
      __syncthreads();
      for (i64 i = hi - 1; i >= lo; --i) {
        const float* b = sm.b[i - lo];
        const float* c = sm.c[i - lo];
        const float dt = sm.dt[i - lo], e = expf(A * dt);
        float cur[N], prev[N], v[2 * N + 1];
        ssm2_load_slot<Cfg>(ssm2_slot(p, u, p.chunks_cap + (i - n0)), units, u, cur);
        const bool at_ckpt = i == n0;  // the state before the chunk's first token is its checkpoint
        ssm2_load_slot<Cfg>(at_ckpt ? ssm2_ckpt(p, u, first, k) : ssm2_slot(p, u, p.chunks_cap + (i - n0 - 1)),
                            at_ckpt ? ssm2_ckpt_stride(p) : units, u, prev);
        const float x = u.active ? ssm2_read<E>(p.x, u.s, i, u.h, u.q) : 0.0f;
        const float dy = u.active ? ssm2_read<E>(p.d_y, u.s, i, u.h, u.q) : 0.0f;
        dd += dy * x;
        float dx = dy * D, ddt = 0.0f;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float dj = dh[j] + dy * c[j];
          v[N + j] = dy * cur[j];  // dc
          ddt += dj * (A * e * prev[j] + x * b[j]);
          da += dj * e * dt * prev[j];
          dx += dj * dt * b[j];
          v[j] = dj * dt * x;  // db
          dh[j] = dj * e;
        }
        v[2 * N] = ddt;
        if (u.active) ssm2_write<E>(p.dx, u.s, i, u.h, u.q, dx);
        float* dst[2 * N + 1];
        const i64 token = ssm1_row(p.cu_seqlens, p.seqlen, u.s, i);
        const i64 row = (token * p.groups + u.g) * N;
#pragma unroll
        for (int j = 0; j < N; ++j) dst[j] = acc.db + row + j, dst[N + j] = acc.dc + row + j;
        dst[2 * N] = acc.ddt + token * p.heads + u.h;
        ssm2_block_add<Cfg>(sm, v, 2 * N + 1, dst);
      }
      hi = lo;
    }
  }
  float tail[2] = {da, dd};
  float* dst[2] = {acc.da + u.h, acc.dd + u.h};
  ssm2_block_add<Cfg>(sm, tail, 2, dst);
  if (p.dh0 != nullptr && u.active) {
    const i64 at = ((u.s * p.heads + u.h) * p.hdim + u.q) * N;
#pragma unroll
    for (int j = 0; j < N; ++j) p.dh0[at + j] = dh[j];
  }
}

// Phase 0 (zero) and phase 2 (write out): a thread per accumulator.
template <class Cfg> __device__ void ssm2_bwd_elementwise(const Ssm2Params& p) {
  const i64 e = i64(blockIdx.x) * kSsm1Threads + threadIdx.x;
  // Varlen: one pack of seqlen tokens, s = 0 (the token tensors' sb is 0).
  const i64 packs = ssm1_packs(p.cu_seqlens, p.batch);
  const i64 total = ssm2_cuda_acc_floats(packs, p.seqlen, p.heads, p.groups, p.nstate);
  if (e >= total) return;
  if (p.phase == 0) {
    p.partial[e] = 0.0f;
    return;
  }
  const float v = p.partial[e];
  const i64 gn = p.groups * p.nstate, bc = packs * p.seqlen * gn, tokens = packs * p.seqlen * p.heads;
  if (e < 2 * bc) {
    const i64 f = e % bc, token = f / gn, r = f % gn, s = token / p.seqlen, i = token % p.seqlen;
    ssm2_write<Cfg::E>(e < bc ? p.dB : p.dC, s, i, r / p.nstate, r % p.nstate, v);
  } else if (e < 2 * bc + tokens) {
    const i64 f = e - 2 * bc, token = f / p.heads;
    ssm2_write<Cfg::E>(p.ddt, token / p.seqlen, token % p.seqlen, f % p.heads, 0, v);
  } else {
    const i64 f = e - 2 * bc - tokens;
    float* out = f < p.heads ? p.dA : p.dD;
    if (out != nullptr) out[f % p.heads] = v;
  }
}

template <class Cfg> __device__ void ssm2_bwd(const Ssm2Params& p) {
  if (p.phase == 1) ssm2_bwd_sweep<Cfg>(p);
  else ssm2_bwd_elementwise<Cfg>(p);
}

}  // namespace ejk::cuda
