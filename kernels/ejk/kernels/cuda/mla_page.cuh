// CUDA multi-head latent attention over a paged latent cache on tensor cores (semantics:
// common/mla_page_params.h), for 16-bit caches.
//
// One block of kMlaThreads threads per (query token, up to kMlaRows query heads): every head
// reads the same latent rows, so a tile of kMlaTile positions' [c, k_pe] rows is staged once in
// shared memory (cp.async, kMlaStages deep) and serves all the block's heads both as keys and,
// its first R columns, as values. Scores: each warp takes a quarter of the R + E reduction for
// all rows and keys of the tile (m16n8k16 from ldmatrix), the partial sums meet in shared
// memory, and every warp then holds the whole score tile and runs the same online softmax.
// Values: warp w owns output columns [w R / 4, (w + 1) R / 4), so the [16, R] f32 accumulator
// is split over the warps by columns (R = 512: 64 registers a thread) and needs no merge: each
// warp writes its columns. Positions past the span load as zeros and are masked to -inf.
#pragma once
#include "ejk/kernels/common/mla_page_params.h"
#include "ejk/kernels/cuda/mma_frag.cuh"

namespace ejk::cuda {

template <int R, int E> struct MlaShape {
  static_assert(R % 64 == 0 && E % 16 == 0, "the tensor-core MLA takes R a multiple of 64, E of 16");
  static constexpr int kW = R + E;           // a staged row: c, then k_pe
  static constexpr int kPitch = kW + 8;      // elements: 16 bytes of padding spread ldmatrix rows over the banks
  static constexpr int kWarps = kMlaThreads / 32;
  static constexpr int kKSteps = kW / 16;
  static constexpr int kCols = R / kWarps;   // output columns per warp
  static constexpr int kColTiles = kCols / 8;
  static constexpr int kTileElems = kMlaTile * kPitch;
  static_assert(kMlaRows == 16 && kMlaTile == 32, "one m16 tile of rows, four n8 tiles of keys");
};

// Issues the copies of positions [j0, j0 + n) of span into the stage (rows at or past n: zeros).
// vec: 16-byte cp.async chunks; else element by element (plain stores, visible after the
// barrier that precedes the tile's use, as the chunks are after their wait).
template <class Cfg>
__device__ __forceinline__ void mla_tc_load(const MlaPageParams& p, const MlaSpan& span, u16* st, i64 j0, int n) {
  using S = MlaShape<Cfg::kR, Cfg::kE>;
  const u16* cache = static_cast<const u16*>(p.cache);
  const u16* nc = static_cast<const u16*>(p.new_c);
  const u16* np = static_cast<const u16*>(p.new_pe);
  if (p.vec != 0) {
    // Four threads a row, so the page lookup is one per thread and tile; their four chunks
    // side by side are 64 contiguous bytes, whole sectors.
    static_assert(kMlaThreads == 4 * kMlaTile, "four threads a row");
    constexpr int kChunks = S::kW / 8;
    const int i = threadIdx.x / 4;
    const u16 *c_src = cache, *pe_src = cache;
    if (i < n) {
      const MlaRow r = mla_row(p, span, j0 + i);
      c_src = (r.fresh ? nc : cache) + r.c, pe_src = (r.fresh ? np : cache) + r.pe;
    }
    for (int c = threadIdx.x % 4; c < kChunks; c += 4)
      cp_async_16(smem_addr(st + i * S::kPitch + c * 8), c * 8 < Cfg::kR ? c_src + c * 8 : pe_src + (c * 8 - Cfg::kR),
                  i < n);
    return;
  }
  for (int x = threadIdx.x; x < kMlaTile * S::kW; x += kMlaThreads) {
    const int i = x / S::kW, d = x % S::kW;
    u16 v = 0;
    if (i < n) {
      const MlaRow r = mla_row(p, span, j0 + i);
      v = d < Cfg::kR ? (r.fresh ? nc : cache)[r.c + d] : (r.fresh ? np : cache)[r.pe + d - Cfg::kR];
    }
    st[i * S::kPitch + d] = v;
  }
}

// Warp `warp`'s share of the tile's scores (k-steps warp, warp + 4, ...) for all 16 rows and 32
// keys, into red[warp][row][key].
template <class Cfg>
__device__ __forceinline__ void mla_tc_partial(const u16* sq, const u16* st, float* red, int warp) {
  using S = MlaShape<Cfg::kR, Cfg::kE>;
  float sp[4][4] = {};
  for (int kk = warp; kk < S::kKSteps; kk += S::kWarps) {
    u32 a[4], b0[4], b1[4];
    frag_a(a, sq, S::kPitch, 0, kk * 16);
    frag_b_nk(b0, st, S::kPitch, 0, kk * 16);
    frag_b_nk(b1, st, S::kPitch, 16, kk * 16);
    mma_16816<Cfg::E>(sp[0], a, b0[0], b0[1]);
    mma_16816<Cfg::E>(sp[1], a, b0[2], b0[3]);
    mma_16816<Cfg::E>(sp[2], a, b1[0], b1[1]);
    mma_16816<Cfg::E>(sp[3], a, b1[2], b1[3]);
  }
  // C fragment: sp[nt][e] is row lane / 4 + 8 (e / 2), key 8 nt + 2 (lane % 4) + e % 2.
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      red[(warp * kMlaRows + lane / 4 + 8 * (e / 2)) * kMlaTile + 8 * nt + 2 * (lane % 4) + e % 2] = sp[nt][e];
}

// The tile's scores from the warps' partials (every warp alike), the online softmax update of
// m (log2 domain) and the per-lane partial sums l, then P times the warp's columns of the tile.
template <class Cfg>
__device__ __forceinline__ void mla_tc_values(const MlaPageParams& p, const u16* st, const float* red, int valid,
                                              int col0, float (&m)[2], float (&l)[2],
                                              float (&o)[MlaShape<Cfg::kR, Cfg::kE>::kColTiles][4]) {
  using S = MlaShape<Cfg::kR, Cfg::kE>;
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32;
  float sc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = lane / 4 + 8 * (e / 2), key = 8 * nt + 2 * (lane % 4) + e % 2;
      float x = 0.0f;
#pragma unroll
      for (int w = 0; w < S::kWarps; ++w) x += red[(w * kMlaRows + row) * kMlaTile + key];
      x *= p.scale;
      if (p.softcap > 0.0f) x = p.softcap * fast_tanh(x / p.softcap);
      sc[nt][e] = key < valid ? x * kLog2e : neg_inf_f32();
    }
  online_softmax_tile<false>(sc, m, l, o);  // the tile has a position: m stays finite
  // P as the A operand of two k-steps of 16 keys: the C layout of two n8 tiles is the A layout.
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    const u32 a[4] = {pack2<Cfg::E>(sc[2 * ks][0], sc[2 * ks][1]), pack2<Cfg::E>(sc[2 * ks][2], sc[2 * ks][3]),
                      pack2<Cfg::E>(sc[2 * ks + 1][0], sc[2 * ks + 1][1]),
                      pack2<Cfg::E>(sc[2 * ks + 1][2], sc[2 * ks + 1][3])};
#pragma unroll
    for (int dp = 0; dp < S::kColTiles / 2; ++dp) {
      u32 b[4];
      frag_b_kn(b, st, S::kPitch, 16 * ks, col0 + 16 * dp);
      mma_16816<Cfg::E>(o[2 * dp], a, b[0], b[1]);
      mma_16816<Cfg::E>(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Block (token blockIdx.x, heads [16 blockIdx.y, + 16)). Cfg: E (bf16 or f16), kR, kE.
template <class Cfg>
__device__ __forceinline__ void mla_page_attention(const MlaPageParams& p) {
  using S = MlaShape<Cfg::kR, Cfg::kE>;
  extern __shared__ __align__(16) unsigned char mla_smem[];
  u16* sq = reinterpret_cast<u16*>(mla_smem);                       // [16][kPitch]
  u16* stages = sq + kMlaRows * S::kPitch;                           // [stages][tile][kPitch]
  float* red = reinterpret_cast<float*>(stages + kMlaStages * S::kTileElems);  // [warps][16][tile]
  const i64 t = blockIdx.x, h0 = i64(blockIdx.y) * kMlaRows;
  const int nh = int(min_of((i64)kMlaRows, p.q_heads - h0));
  const MlaSpan span = mla_span(p, t);
  const int tiles = int((span.end - span.begin + kMlaTile - 1) / kMlaTile);

  if (tiles > 0) mla_tc_load<Cfg>(p, span, stages, span.begin, int(min_of((i64)kMlaTile, span.end - span.begin)));
  cp_async_commit();
  const u16* qn = static_cast<const u16*>(p.q_nope) + t * p.qn_st + h0 * p.qn_sh;
  const u16* qp = static_cast<const u16*>(p.q_pe) + t * p.qp_st + h0 * p.qp_sh;
  for (int x = threadIdx.x; x < kMlaRows * S::kW; x += kMlaThreads) {
    const int h = x / S::kW, d = x % S::kW;
    // Padding rows: zero scores, never written.
    sq[h * S::kPitch + d] = h >= nh ? u16(0) : d < Cfg::kR ? qn[h * p.qn_sh + d] : qp[h * p.qp_sh + d - Cfg::kR];
  }

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, col0 = warp * S::kCols;
  float m[2] = {neg_inf_f32(), neg_inf_f32()}, l[2] = {0.0f, 0.0f};
  float o[S::kColTiles][4];
#pragma unroll
  for (int dt = 0; dt < S::kColTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.0f;

  for (int k = 0; k < tiles; ++k) {
    cp_async_wait<0>();
    __syncthreads();  // tile k (and the query) visible to every warp; tile k - 1's stage and red are free
    if (k + 1 < tiles) {
      const i64 j0 = span.begin + i64(k + 1) * kMlaTile;
      mla_tc_load<Cfg>(p, span, stages + ((k + 1) % kMlaStages) * S::kTileElems, j0,
                       int(min_of((i64)kMlaTile, span.end - j0)));
    }
    cp_async_commit();
    const u16* st = stages + (k % kMlaStages) * S::kTileElems;
    mla_tc_partial<Cfg>(sq, st, red, warp);
    __syncthreads();  // every warp's partial scores in red
    const int valid = int(min_of((i64)kMlaTile, span.end - span.begin - i64(k) * kMlaTile));
    mla_tc_values<Cfg>(p, st, red, valid, col0, m, l, o);
  }
  cp_async_wait<0>();

  u16* out = static_cast<u16*>(p.out) + t * p.o_st + h0 * p.o_sh;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = lane / 4 + 8 * r;
    const float sum = quad_sum(l[r]);
    if (row >= nh) continue;
    const float f = sum > 0.0f ? p.v_scale / sum : 0.0f;  // nothing visible: 0
#pragma unroll
    for (int dt = 0; dt < S::kColTiles; ++dt) {
      const u32 v = pack2<Cfg::E>(o[dt][2 * r] * f, o[dt][2 * r + 1] * f);
      u16* dst = out + row * p.o_sh + col0 + 8 * dt + 2 * (lane % 4);
      dst[0] = u16(v & 0xffffu), dst[1] = u16(v >> 16);
    }
  }
}

}  // namespace ejk::cuda
