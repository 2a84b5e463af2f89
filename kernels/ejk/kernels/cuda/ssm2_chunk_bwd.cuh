// CUDA Mamba-2 backward as chunked SSD on tensor cores, for the keys ssm2_chunked() names
// (16-bit, N 64 or 128): the forward's mapping (cuda/ssm2_chunk.cuh: q = C_g, k = B_g, v = x_h,
// log decay dt A[h], key weight dt, skip D[h]) on cuda/linear_chunk_bwd.cuh, then sums in a fixed
// order (deterministic, no atomics). Phase 1: a block per (sequence, head, tile of 32 head dims)
// writes dx and d_initial_state and its partial sums (common/ssm2_params.h, ssm2_chunk_part);
// phase 2: a thread per (token, group, state entry) adds dC and dB over the group's heads and
// the tiles, and a thread per (token, head) forms ddt = A dl + dw, dt dl and sum_p dy x; phase 3:
// a block per head adds those over the tokens into da and dd.
#pragma once
#include "ejk/kernels/cuda/linear_chunk_bwd.cuh"
#include "ejk/kernels/cuda/ssm2_chunk.cuh"

namespace ejk::cuda {

// The workspace's parts (ssm2_chunk_work_floats).
struct Ssm2ChunkWork {
  float *ckpt, *part, *tdl, *tdd;
  i64 rows;  // packed token rows: packs * S
};
__device__ __forceinline__ Ssm2ChunkWork ssm2_chunk_work(const Ssm2Params& p) {
  const i64 rows = ssm1_packs(p.cu_seqlens, p.batch) * p.seqlen;
  float* const part = p.work + ssm2_chunk_ckpt_floats(rows, p.batch, p.heads, p.hdim, p.nstate);
  float* const tdl = part + ssm2_chunk_tiles(p.hdim) * rows * p.heads * ssm2_chunk_part(p.nstate);
  return {p.work, part, tdl, tdl + rows * p.heads, rows};
}

__device__ __forceinline__ ChunkBwdView ssm2_chunk_bwd_view(const Ssm2Params& p) {
  const i64 tiles = ssm2_chunk_tiles(p.hdim), u = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const i64 s = u / p.heads, h = u % p.heads, c0 = tile * kLinearChunkCols;
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  const i64 row0 = ssm1_row(p.cu_seqlens, p.seqlen, s, sp.begin);
  const Ssm2ChunkWork w = ssm2_chunk_work(p);
  ChunkBwdView b{};
  b.f = ssm2_chunk_view(p);
  b.d_o = static_cast<const u16*>(p.d_y.data) + ssm2_at(p.d_y, s, sp.begin, h) + c0, b.sdo = p.d_y.ss;
  if (p.dx.data != nullptr) b.dv = static_cast<u16*>(p.dx.data) + ssm2_at(p.dx, s, sp.begin, h) + c0, b.sdv = p.dx.ss;
  const i64 part = ssm2_chunk_part(p.nstate);
  b.part = w.part + ((tile * w.rows + row0) * p.heads + h) * part, b.spart = p.heads * part;
  const i64 state = (s * p.heads + h) * p.hdim * p.nstate + c0 * p.nstate;
  b.dht = p.dht != nullptr ? p.dht + state : nullptr;
  b.dh0 = p.dh0 != nullptr ? p.dh0 + state : nullptr;
  const i64 slot = (h * tiles + tile) * linear_chunk_bwd_slots(w.rows, p.batch) + linear_chunk_bwd_first_slot(row0, s);
  b.ckpt = w.ckpt + slot * p.nstate * kLinearChunkCols;
  return b;
}

// 16-bit token tensor elements (the chunked keys' only type); a null tensor is not written.
template <Elem E> __device__ __forceinline__ float ssm2_chunk_read(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c) {
  return to_f32<E>(static_cast<const u16*>(t.data)[ssm2_at(t, s, i, h) + c]);
}
template <Elem E> __device__ __forceinline__ void ssm2_chunk_write(const Ssm2Tokens& t, i64 s, i64 i, i64 h, i64 c, float x) {
  if (t.data != nullptr) static_cast<u16*>(t.data)[ssm2_at(t, s, i, h) + c] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

// The token tensors' (sequence, token) of a packed row: dense s = row / S; varlen s = 0.
__device__ __forceinline__ void ssm2_row_at(const Ssm2Params& p, i64 row, i64& s, i64& i) {
  s = row / p.seqlen, i = row % p.seqlen;
}

// Phase 2.
template <class Cfg> __device__ void ssm2_chunk_bwd_rows(const Ssm2Params& p) {
  constexpr int N = Cfg::kN;
  const Ssm2ChunkWork w = ssm2_chunk_work(p);
  const i64 tiles = ssm2_chunk_tiles(p.hdim), part = ssm2_chunk_part(N), per = p.heads / p.groups;
  const i64 e = i64(blockIdx.x) * kLinearChunkThreads + threadIdx.x, entries = w.rows * p.groups * N;
  i64 s, i;
  if (e < entries) {
    const i64 r = e % N, g = e / N % p.groups, row = e / (N * p.groups);
    float dc = 0.0f, db = 0.0f;
    for (i64 t = 0; t < tiles; ++t)
      for (i64 h = g * per; h < (g + 1) * per; ++h) {
        const float* x = w.part + ((t * w.rows + row) * p.heads + h) * part;
        dc += x[r], db += x[N + r];
      }
    ssm2_row_at(p, row, s, i);
    ssm2_chunk_write<Cfg::E>(p.dC, s, i, g, r, dc);
    ssm2_chunk_write<Cfg::E>(p.dB, s, i, g, r, db);
    return;
  }
  const i64 f = e - entries;
  if (f >= w.rows * p.heads) return;
  const i64 h = f % p.heads, row = f / p.heads;
  float dl = 0.0f, dw = 0.0f;
  for (i64 t = 0; t < tiles; ++t) {
    const float* x = w.part + ((t * w.rows + row) * p.heads + h) * part;
    dl += x[2 * N], dw += x[2 * N + 1];
  }
  ssm2_row_at(p, row, s, i);
  const float dt = ssm2_chunk_read<Cfg::E>(p.dt, s, i, h, 0);
  ssm2_chunk_write<Cfg::E>(p.ddt, s, i, h, 0, p.A[h] * dl + dw);
  float dd = 0.0f;
  for (i64 q = 0; q < p.hdim; ++q) dd += ssm2_chunk_read<Cfg::E>(p.d_y, s, i, h, q) * ssm2_chunk_read<Cfg::E>(p.x, s, i, h, q);
  w.tdl[f] = dt * dl, w.tdd[f] = dd;
}

// Phase 3: block h adds tdl and tdd over the rows, each thread a strided share, then a tree
// (in the dynamic shared memory: ssm2_chunk_bwd_smem(3, ..)).
template <class Cfg> __device__ void ssm2_chunk_bwd_heads(const Ssm2Params& p) {
  extern __shared__ __align__(16) unsigned char linear_chunk_smem[];
  float* const ra = reinterpret_cast<float*>(linear_chunk_smem);
  float* const rd = ra + kLinearChunkThreads;
  const Ssm2ChunkWork w = ssm2_chunk_work(p);
  const i64 h = blockIdx.x;
  const int t = threadIdx.x;
  float a = 0.0f, d = 0.0f;
  for (i64 row = t; row < w.rows; row += kLinearChunkThreads) a += w.tdl[row * p.heads + h], d += w.tdd[row * p.heads + h];
  ra[t] = a, rd[t] = d;
  __syncthreads();
  for (int o = kLinearChunkThreads / 2; o > 0; o /= 2) {
    if (t < o) ra[t] += ra[t + o], rd[t] += rd[t + o];
    __syncthreads();
  }
  if (t == 0) {
    if (p.dA != nullptr) p.dA[h] = ra[0];
    if (p.dD != nullptr) p.dD[h] = rd[0];
  }
}

template <class Cfg> __device__ void ssm2_chunk_bwd(const Ssm2Params& p) {
  if (p.phase == 1) {
    ChunkBwdView b = ssm2_chunk_bwd_view(p);
    linear_chunk_bwd<Cfg::E, Cfg::kN>(b);
  } else if (p.phase == 2) {
    ssm2_chunk_bwd_rows<Cfg>(p);
  } else {
    ssm2_chunk_bwd_heads<Cfg>(p);
  }
}

}  // namespace ejk::cuda
