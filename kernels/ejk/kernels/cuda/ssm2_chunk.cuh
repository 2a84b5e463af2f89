// CUDA Mamba-2 forward as chunked SSD on tensor cores: the scan of common/ssm2_params.h is
// scalar-decay linear attention, per sequence and head h (group g), with q = C_g, k = B_g,
// v = x_h, the log decay dt A[h], the key weight dt and the skip D[h] x. The chunk loop is
// cuda/linear_chunk.cuh's; one block per (sequence, head, tile of 32 head dims), its [N, 32]
// slice of the head's state h [P, N] transposed in the accumulators.
#pragma once
#include "ejk/kernels/common/ssm2_params.h"
#include "ejk/kernels/cuda/linear_chunk.cuh"

namespace ejk::cuda {

// Blocks per (sequence, head): the head dim in tiles of 32.
EJK_HD constexpr i64 ssm2_chunk_tiles(i64 hdim) { return ceil_div<i64>(hdim, kLinearChunkCols); }

__device__ __forceinline__ ChunkView ssm2_chunk_view(const Ssm2Params& p) {
  const i64 tiles = ssm2_chunk_tiles(p.hdim), u = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const i64 s = u / p.heads, h = u % p.heads, g = ssm2_group(p, h), c0 = tile * kLinearChunkCols;
  const TokenSpan sp = ssm1_span(p.cu_seqlens, p.seqlen, s);
  auto base = [&](const Ssm2Tokens& t, i64 head) {
    return static_cast<const u16*>(t.data) + ssm2_at(t, s, sp.begin, head);
  };
  ChunkView v{};
  v.q = base(p.C, g), v.sq = p.C.ss;
  v.k = base(p.B, g), v.sk = p.B.ss;
  v.v = base(p.x, h) + c0, v.sv = p.x.ss;
  v.o = static_cast<u16*>(p.y.data) + ssm2_at(p.y, s, sp.begin, h) + c0, v.so = p.y.ss;
  v.len = sp.end - sp.begin, v.ncols = int(min_of<i64>(kLinearChunkCols, p.hdim - c0));
  const i64 state = (s * p.heads + h) * p.hdim * p.nstate + c0 * p.nstate;
  v.h0 = p.h0 != nullptr ? p.h0 + state : nullptr;
  v.ht = p.ht != nullptr ? p.ht + state : nullptr;
  v.srow = 1, v.scol = p.nstate;
  v.gate = base(p.dt, h), v.sg = p.dt.ss;
  v.gate_mul = p.A[h], v.gate_add = 0.0f, v.weighted = true;
  v.scale = 1.0f, v.skip = p.D[h];
  return v;
}

template <class Cfg> __device__ void ssm2_chunk_fwd(const Ssm2Params& p) {
  linear_chunk_fwd<Cfg::E, Cfg::kN>(ssm2_chunk_view(p));
}

}  // namespace ejk::cuda
