// Flash attention forward, sm_80 family (also runs on sm_90): FA2-style tiling with
// mma.sync m16n8k16, ldmatrix and a cp.async double buffer for K/V.
//
// One block = kBlockQ / 16 warps = kBlockQ query rows of one (sequence, q head). Each warp owns
// kMTiles 16-row tiles of the Q block for the whole kernel, so the online softmax state of a
// row lives in the 4 lanes of one quad and needs only quad shuffles, never shared memory.
// Semantics (mask, logit transform, sinks, lse) are mask.h's; see flash_fwd_tile.cuh for the
// per-tile pieces.
#pragma once
#include "ejk/kernels/cuda/flash_dense_mask.cuh"
#include "ejk/kernels/cuda/flash_dropout.cuh"
#include "ejk/kernels/cuda/flash_fwd_tile.cuh"

namespace ejk::cuda {

// Global -> shared copy of `rows` rows (row r at src + r * stride) into a padded tile;
// rows at or past `valid_rows` are zero-filled.
template <class C>
__device__ __forceinline__ void load_tile_async(u16* dst, const u16* src, i64 stride, int rows,
                                                int valid_rows) {
  constexpr int kChunksPerRow = C::kHeadDim / 8;  // 16-byte chunks
  const int total = rows * kChunksPerRow;
  for (int i = threadIdx.x; i < total; i += C::kThreads) {
    const int r = i / kChunksPerRow, c = i % kChunksPerRow;
    const bool valid = r < valid_rows;
    const u16* g = valid ? src + r * stride + c * 8 : src;
    cp_async_16(smem_addr(dst + r * C::kRowPitch + c * 8), g, valid);
  }
}

// S = Q K^T for one K tile: s[mt][nt] is the C fragment of rows (warp, mt), keys nt*8..+7.
template <class C>
__device__ __forceinline__ void qk_tile(float (&s)[C::kMTiles][C::kNTiles][4], const u16* sQ,
                                        const u16* sK, int warp_row0, int lane) {
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][nt][i] = 0.f;

  // ldmatrix row addresses: A (Q) matrices ordered (rows 0-7, 8-15) x (cols 0-7, 8-15);
  // B (K) matrices ordered (keys 0-7 | cols 0-7, 8-15), (keys 8-15 | cols 0-7, 8-15).
  const int a_row = warp_row0 + (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; ++kk) {
    u32 a[C::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt)
      ldmatrix_x4(a[mt], smem_addr(sQ + (a_row + mt * 16) * C::kRowPitch + kk * 16 + a_col));
#pragma unroll
    for (int np = 0; np < C::kNTiles / 2; ++np) {
      u32 b[4];
      ldmatrix_x4(b, smem_addr(sK + (np * 16 + b_row) * C::kRowPitch + kk * 16 + b_col));
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        mma_16816<C::kElem>(s[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<C::kElem>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// O += P V: P comes straight from the S fragments (the C layout of two n-tiles is the A
// layout of one k-step), V through ldmatrix.trans.
template <class C>
__device__ __forceinline__ void pv_tile(float (&o)[C::kMTiles][C::kDTiles][4],
                                        const float (&s)[C::kMTiles][C::kNTiles][4],
                                        const u16* sV, int lane) {
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < C::kBlockK / 16; ++kk) {
    u32 a[C::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
      a[mt][0] = pack2<C::kElem>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      a[mt][1] = pack2<C::kElem>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      a[mt][2] = pack2<C::kElem>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      a[mt][3] = pack2<C::kElem>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < C::kDTiles / 2; ++dp) {
      u32 b[4];
      ldmatrix_x4_trans(b, smem_addr(sV + (kk * 16 + v_row) * C::kRowPitch + dp * 16 + v_col));
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        mma_16816<C::kElem>(o[mt][2 * dp], a[mt], b[0], b[1]);
        mma_16816<C::kElem>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Writes the finished O tile: fragments -> shared (the Q buffer, no longer read) -> 16-byte
// coalesced global stores of the rows inside the sequence.
template <class C>
__device__ __forceinline__ void store_o_tile(const float (&o)[C::kMTiles][C::kDTiles][4],
                                             const RowState (&rows)[C::kMTiles][2], u16* sO,
                                             u16* gO, i64 o_stride_s, int valid_rows,
                                             int warp_row0, int lane) {
  __syncthreads();  // every warp is done reading sQ / sK / sV
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + (lane >> 2) + half * 8;
      const float inv = rows[mt][half].out_scale;
#pragma unroll
      for (int dt = 0; dt < C::kDTiles; ++dt) {
        const u32 v = pack2<C::kElem>(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
        *reinterpret_cast<u32*>(sO + r * C::kRowPitch + dt * 8 + (lane & 3) * 2) = v;
      }
    }
  __syncthreads();
  constexpr int kChunksPerRow = C::kHeadDim / 8;
  for (int i = threadIdx.x; i < C::kBlockQ * kChunksPerRow; i += C::kThreads) {
    const int r = i / kChunksPerRow, c = i % kChunksPerRow;
    if (r < valid_rows)
      *reinterpret_cast<uint4*>(gO + r * o_stride_s + c * 8) =
          *reinterpret_cast<const uint4*>(sO + r * C::kRowPitch + c * 8);
  }
}

// The key tiles a block visits, in order: flash attention's are the range the tile classifier
// gives. Another walk (block-sparse attention's layout row, blocksparse_fwd.cuh) skips tiles; the
// kernel body below takes any type with these members.
struct KeyTileRange {
  TileRange r;
  __device__ __forceinline__ int first() const { return r.begin; }
  __device__ __forceinline__ int next(int tile) const { return tile + 1; }
  __device__ __forceinline__ bool done(int tile) const { return tile >= r.end; }
  // Whether tile may hold pairs of different segments (else mask_segments is skipped).
  __device__ __forceinline__ bool mixed_segments(int) const { return true; }
  // The tile's position in the walk, for the stage rings: tile - begin here; n (tiles done)
  // for walks that skip.
  __device__ __forceinline__ int ordinal(int tile, int) const { return tile - r.begin; }
};

// The forward of one (q block, q head, sequence) over the key tiles make_walk(mask, seq, h, q0,
// tail) returns: `tail` is the shared memory past the K/V stages, and every thread of the block
// calls it once (a walk may build itself there, with barriers).
template <class C, class MakeWalk>
__device__ __forceinline__ void flash_fwd_sm80_walk(const FlashFwdParams& p, MakeWalk&& make_walk) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16* sQ = reinterpret_cast<u16*>(smem_raw);                         // [kBlockQ, kRowPitch]
  u16* sK = sQ + C::kQTileElems;                                      // [kStages][kBlockK, kRowPitch]
  u16* sV = sK + C::kStages * C::kKVTileElems;                        // [kStages][kBlockK, kRowPitch]

  const SeqSpan seq = sequence_span(p, blockIdx.z);
  const int q_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal) blocks first
  const i64 q0 = i64(q_block) * C::kBlockQ;
  if (q0 >= seq.len_q) return;
  const i64 h = blockIdx.y, hk = h / (p.heads_q / p.heads_kv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warp_row0 = warp * C::kMTiles * 16;
  const int valid_q = int(min_of<i64>(C::kBlockQ, seq.len_q - q0));

  const u16* gQ = static_cast<const u16*>(p.q) + seq.b * p.q_stride_b +
                  (seq.q_begin + q0) * p.q_stride_s + h * p.q_stride_h;
  const u16* gK = static_cast<const u16*>(p.k) + seq.b * p.k_stride_b +
                  seq.k_begin * p.k_stride_s + hk * p.k_stride_h;
  const u16* gV = static_cast<const u16*>(p.v) + seq.b * p.v_stride_b +
                  seq.k_begin * p.v_stride_s + hk * p.v_stride_h;

  const MaskSpec mask = variant_mask<C::kFlags>(p.mask);

  load_tile_async<C>(sQ, gQ, p.q_stride_s, C::kBlockQ, valid_q);
  cp_async_commit();
  // After the Q load is issued: a walk that reads its layout row overlaps it.
  const auto walk = make_walk(mask, seq, h, q0, reinterpret_cast<unsigned char*>(sV + C::kStages * C::kKVTileElems));
  auto load_kv = [&](int tile, int stage) {
    const i64 k0 = i64(tile) * C::kBlockK;
    const int valid_k = int(min_of<i64>(C::kBlockK, seq.len_k - k0));
    load_tile_async<C>(sK + stage * C::kKVTileElems, gK + k0 * p.k_stride_s, p.k_stride_s,
                       C::kBlockK, valid_k);
    load_tile_async<C>(sV + stage * C::kKVTileElems, gV + k0 * p.v_stride_s, p.v_stride_s,
                       C::kBlockK, valid_k);
  };
  int ahead = walk.first();  // the next tile to load
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (!walk.done(ahead)) load_kv(ahead, s), ahead = walk.next(ahead);
    cp_async_commit();  // empty groups keep the wait counts uniform
  }

  const TileContext ctx = tile_context<C>(p, seq, h, q0, warp_row0, lane);
  RowState rows[C::kMTiles][2];
  init_rows<C>(rows);
  float o[C::kMTiles][C::kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < C::kDTiles; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][dt][i] = 0.f;

  int step = 0;  // tiles done: the stage ring's position
  for (int tile = walk.first(); !walk.done(tile); tile = walk.next(tile), ++step) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();  // tile's K/V visible to all warps; the oldest stage is free again
    if (!walk.done(ahead)) load_kv(ahead, (step + C::kStages - 1) % C::kStages), ahead = walk.next(ahead);
    cp_async_commit();

    const int stage = step % C::kStages;
    float s[C::kMTiles][C::kNTiles][4];
    qk_tile<C>(s, sQ, sK + stage * C::kKVTileElems, warp_row0, lane);
    const i64 k0 = i64(tile) * C::kBlockK;
    logits_to_log2<C>(s, p, ctx, seq, k0, lane);
    if (tile_needs_mask<C>(mask, q0, k0, seq.len_k)) mask_logits<C>(s, ctx, mask, seq, k0, lane);
    if constexpr (C::kSegments)
      if (walk.mixed_segments(tile)) mask_segments<C>(s, ctx, seq, k0, lane);
    if constexpr (C::kFlags.dense_mask)
      if (walk.partial(tile)) mask_dense<C>(s, p, ctx, seq, h, k0, lane);
    online_softmax<C>(s, o, rows);
    // After the row sums (the denominator does not see dropout), before P V.
    if constexpr (C::kFlags.dropout) drop_query_rows(s, flash_dropout(p), seq.index, h, q0 + warp_row0, k0, lane);
    pv_tile<C>(o, s, sV + stage * C::kKVTileElems, lane);
  }
  cp_async_wait<0>();

  finish_rows<C>(rows, p, h);
  write_lse<C>(rows, p, seq, h, q0, warp_row0, lane);
  u16* gO = static_cast<u16*>(p.out) + seq.b * p.o_stride_b + (seq.q_begin + q0) * p.o_stride_s +
            h * p.o_stride_h;
  store_o_tile<C>(o, rows, sQ, gO, p.o_stride_s, valid_q, warp_row0, lane);
}

// Dense-mask keys walk the tiles the device summary does not mark hidden (flash_dense_mask.cuh).
template <class C>
__device__ __forceinline__ void flash_fwd_sm80(const FlashFwdParams& p) {
  if constexpr (C::kFlags.dense_mask) {
    flash_fwd_sm80_walk<C>(p, [&](const MaskSpec& mask, const SeqSpan& seq, i64 h, i64 q0, unsigned char*) {
      return dense_key_walk<C>(p, mask, seq, h, q0);
    });
  } else {
    flash_fwd_sm80_walk<C>(p, [](const MaskSpec& mask, const SeqSpan& seq, i64, i64 q0, unsigned char*) {
      return KeyTileRange{key_range<C>(mask, q0, seq.len_k)};
    });
  }
}

}  // namespace ejk::cuda
