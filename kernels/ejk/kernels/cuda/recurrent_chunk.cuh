// CUDA recurrent attention forward, chunked on tensor cores, for a decay that is one scalar
// per head and token (log space): g_gamma per head and/or the per-token scalar gate g_head.
// The chunk loop is cuda/linear_chunk.cuh's; this file maps a block's (sequence, head, tile of
// 32 state columns) onto it. Semantics: common/recurrent_params.h.
#pragma once
#include "ejk/kernels/cuda/linear_chunk.cuh"
#include "ejk/kernels/cuda/recurrent.cuh"

namespace ejk::cuda {

template <class Cfg> __device__ __forceinline__ ChunkView recurrent_chunk_view(const RecurrentParams& p) {
  const RecurrentUnit u = recurrent_unit(p);
  const i64 first = recurrent_token(u.sp, 0, Cfg::kReverse), dir = Cfg::kReverse ? -1 : 1;
  auto at = [&](const RecurrentTokens& t) { return recurrent_at(p, t, u.s, first, u.h); };
  ChunkView v{};
  v.q = static_cast<const u16*>(p.q.data) + at(p.q), v.sq = dir * p.q.st;
  v.k = static_cast<const u16*>(p.k.data) + at(p.k), v.sk = dir * p.k.st;
  v.v = static_cast<const u16*>(p.v.data) + at(p.v) + u.c0, v.sv = dir * p.v.st;
  v.o = static_cast<u16*>(p.o.data) + at(p.o) + u.c0, v.so = dir * p.o.st;
  v.len = u.sp.end - u.sp.begin, v.ncols = u.ncols;
  const i64 state = recurrent_state_at(p, u.s, u.h) + u.c0;
  v.h0 = p.h0 != nullptr ? p.h0 + state : nullptr;
  v.ht = p.ht != nullptr ? p.ht + state : nullptr;
  v.srow = p.dv_, v.scol = 1;
  if constexpr (recurrent_head_gate<Cfg>()) v.gate = static_cast<const u16*>(p.gh.data) + at(p.gh), v.sg = dir * p.gh.st;
  v.gate_mul = 1.0f, v.gate_add = Cfg::kGamma ? p.g_gamma[u.h] : 0.0f;
  v.scale = p.scale;
  return v;
}

// The forward entry: the key decides between the chunked kernel and the token kernel.
template <class Cfg> __device__ void recurrent_fwd_entry(const RecurrentParams& p) {
  if constexpr (Cfg::kChunked) linear_chunk_fwd<Cfg::E, Cfg::kK>(recurrent_chunk_view<Cfg>(p));
  else recurrent_fwd<Cfg>(p);
}

}  // namespace ejk::cuda
