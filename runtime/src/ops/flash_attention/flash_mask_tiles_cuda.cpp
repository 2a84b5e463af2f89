// The dense mask's tile summary launch (flash_mask_tiles_cuda.h). Built with CUDA only.
#include "ops/flash_attention/flash_mask_tiles_cuda.h"

#include <algorithm>
#include <climits>


namespace ejk::ops {

size_t mask_tiles_bytes(const FlashFwdParams& p, int64_t block_q, int64_t block_k) {
  if (p.dense_mask == nullptr) return 0;
  const FlashMaskTiles t = flash_mask_tiles_of(p, block_q, block_k);
  return size_t(t.batches * t.heads * t.q_tiles * t.k_tiles);
}

size_t mask_tiles_offset(size_t used) { return (used + 255) / 256 * 256; }

void launch_mask_tiles(engine::CudaLaunchContext& lc, size_t kernel, FlashFwdParams& p, int64_t block_q, int64_t block_k,
                       void* dst) {
  FlashMaskTiles t = flash_mask_tiles_of(p, block_q, block_k);
  t.tiles = static_cast<u8*>(dst);
  p.mask_tiles = t.tiles;
  const int64_t tiles = t.batches * t.heads * t.q_tiles * t.k_tiles;
  if (tiles == 0) return;
  // One block per tile; past 2^31 - 1 tiles, rows of gridDim.x blocks (the kernel flattens both).
  const int64_t x = std::min<int64_t>(tiles, INT_MAX);
  void* args[] = {&t};
  lc.launch(kernel, engine::Grid{unsigned(x), unsigned(ceil_div<int64_t>(tiles, x)), 1}, kMaskTilesThreads, 0, args);
}

}  // namespace ejk::ops
