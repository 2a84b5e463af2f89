// CUDA recurrent attention backward, chunked on tensor cores (cuda/linear_chunk_bwd.cuh), for the
// keys the chunked forward takes (recurrent_chunked(): one scalar decay per head and token, here
// g_gamma; 16-bit, K, V in {64, 128}). Phase 0 maps a block's (sequence, head, tile of 32 state
// columns) onto the chunk loop; phase 1 is the token kernel's sum of the tiles' partial row sums
// (dq, dk, d log decay) in tile order.
#pragma once
#include "ejk/kernels/cuda/linear_chunk_bwd.cuh"
#include "ejk/kernels/cuda/recurrent_chunk.cuh"

namespace ejk::cuda {

template <class Cfg> __device__ __forceinline__ ChunkBwdView recurrent_chunk_bwd_view(const RecurrentParams& p) {
  const RecurrentUnit u = recurrent_unit(p);
  const i64 tile = u.c0 / kRecurrentTile, first = recurrent_token(u.sp, 0, Cfg::kReverse), dir = Cfg::kReverse ? -1 : 1;
  auto at = [&](const RecurrentTokens& t) { return recurrent_at(p, t, u.s, first, u.h); };
  ChunkBwdView b{};
  b.f = recurrent_chunk_view<Cfg>(p);
  b.d_o = static_cast<const u16*>(p.d_o.data) + at(p.d_o) + u.c0, b.sdo = dir * p.d_o.st;
  if (p.dv.data != nullptr) b.dv = static_cast<u16*>(p.dv.data) + at(p.dv) + u.c0, b.sdv = dir * p.dv.st;
  if (p.dgv.data != nullptr) b.dgv = static_cast<u16*>(p.dgv.data) + at(p.dgv) + u.c0, b.sdgv = dir * p.dgv.st;
  b.part = recurrent_partial(p, tile, first, u.h), b.spart = dir * p.heads * 3 * p.dk_, b.row_gates = true;
  const i64 state = recurrent_state_at(p, u.s, u.h) + u.c0;
  b.dht = p.dht != nullptr ? p.dht + state : nullptr;
  b.dh0 = p.dh0 != nullptr ? p.dh0 + state : nullptr;
  const i64 slot = (u.h * p.v_tiles + tile) * linear_chunk_bwd_slots(p.total, p.sequences) +
                   linear_chunk_bwd_first_slot(u.sp.begin, u.s);
  b.ckpt = p.work + slot * Cfg::kK * kLinearChunkCols;
  return b;
}

// The backward entry: the key decides between the chunked kernel and the token kernel.
template <class Cfg> __device__ void recurrent_bwd_entry(const RecurrentParams& p) {
  if constexpr (Cfg::kChunked) {
    if (p.phase == 0) linear_chunk_bwd<Cfg::E, Cfg::kK>(recurrent_chunk_bwd_view<Cfg>(p));
    else recurrent_bwd_sum<Cfg>(p);
  } else {
    if (p.phase == 0) recurrent_bwd_sweep<Cfg>(p);
    else recurrent_bwd_sum<Cfg>(p);
  }
}

}  // namespace ejk::cuda
