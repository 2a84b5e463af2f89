// The dense mask's tile summary behind FlashMaskTiles (flash_params.h): what the runtime runs
// before a dense-mask key's kernel (runtime/src/ops/flash_attention/flash_cuda.cpp), so the
// kernel's walk skips the tiles the mask hides entirely before loading their K/V, and masks pair
// by pair only the tiles it hides in part; and those walks. Its own op (specs/flash_mask_tiles.yaml):
// one cubin per arch serves every dense-mask key. One block per tile; the mask's bytes are read once.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

__device__ __forceinline__ void flash_mask_tiles(const FlashMaskTiles& t) {
  const i64 tile = i64(blockIdx.x) + i64(blockIdx.y) * gridDim.x;  // flattened (plane, q tile, k tile)
  const i64 per_plane = t.q_tiles * t.k_tiles;
  if (tile >= t.batches * t.heads * per_plane) return;  // uniform per block
  const i64 plane = tile / per_plane, qt = tile % per_plane / t.k_tiles, kt = tile % t.k_tiles;
  const i64 q0 = qt * t.block_q, k0 = kt * t.block_k;
  const int rows = int(min_of(t.block_q, t.rows - q0)), keys = int(min_of(t.block_k, t.keys - k0));
  const u8* base = t.mask + plane / t.heads * t.stride_b + plane % t.heads * t.stride_h + q0 * t.stride_q + k0;
  int any = 0, all = 1;
  for (int i = threadIdx.x; i < rows * keys; i += int(kMaskTilesThreads)) {
    const int visible = dense_mask_visible(base + i64(i / keys) * t.stride_q, i % keys) ? 1 : 0;
    any |= visible;
    all &= visible;
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  if (threadIdx.x == 0) t.tiles[tile] = !any ? kMaskTileHidden : all ? kMaskTileVisible : kMaskTilePartial;
}

// The key tiles of one query tile that the position mask allows and the dense mask does not hide
// entirely, in order (the forward's and the dQ kernel's walk; flash_fwd_sm80.cuh KeyTileRange's
// members). Every thread reads the same summary bytes, so the walk stays uniform.
struct DenseKeyTileWalk {
  TileRange r;
  const FlashFwdParams* p;
  i64 b, h, q_tile, block_q, block_k;
  __device__ __forceinline__ u8 tile_class(int tile) const {
    return flash_mask_tile(*p, b, h, q_tile, tile, block_q, block_k);
  }
  __device__ __forceinline__ int skip(int tile) const {
    while (tile < r.end && tile_class(tile) == kMaskTileHidden) ++tile;
    return tile;
  }
  __device__ __forceinline__ int first() const { return skip(r.begin); }
  __device__ __forceinline__ int next(int tile) const { return skip(tile + 1); }
  __device__ __forceinline__ bool done(int tile) const { return tile >= r.end; }
  __device__ __forceinline__ bool mixed_segments(int) const { return true; }
  __device__ __forceinline__ int ordinal(int, int n) const { return n; }
  // Whether the tile needs the per-pair dense mask (some pair hidden).
  __device__ __forceinline__ bool partial(int tile) const { return tile_class(tile) == kMaskTilePartial; }
};

// The (query head of the group, query tile) steps of one key tile that the dense mask does not
// hide entirely, head-major (the dK/dV kernel's walk; flash_bwd_tc.cuh QueryStepRange's members).
struct DenseQueryStepWalk {
  TileRange qt;
  i64 steps;  // heads of the group x qt.count()
  const FlashFwdParams* p;
  i64 b, h0, k_tile, block_q, block_k;
  __device__ __forceinline__ i64 head(i64 step) const { return step / qt.count(); }
  __device__ __forceinline__ int tile(i64 step) const { return qt.begin + int(step % qt.count()); }
  __device__ __forceinline__ u8 tile_class(i64 step) const {
    return flash_mask_tile(*p, b, h0 + head(step), tile(step), k_tile, block_q, block_k);
  }
  __device__ __forceinline__ i64 skip(i64 step) const {
    while (step < steps && tile_class(step) == kMaskTileHidden) ++step;
    return step;
  }
  __device__ __forceinline__ i64 first() const { return skip(0); }
  __device__ __forceinline__ i64 next(i64 step) const { return skip(step + 1); }
  __device__ __forceinline__ bool done(i64 step) const { return step >= steps; }
  __device__ __forceinline__ i64 ordinal(i64, int n) const { return n; }
  __device__ __forceinline__ bool partial(i64 step) const { return tile_class(step) == kMaskTilePartial; }
};

}  // namespace ejk::cuda
