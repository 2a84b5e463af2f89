// The dense mask's tile summary on CUDA (kernels/ejk/kernels/cuda/flash_mask_tiles.cuh): its
// scratch bytes and its launch, shared by flash_attention and flash_attention_backward, which run
// it before their kernels so that those skip the tiles the mask hides. Built with CUDA only.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ejk/kernels/common/flash_params.h"
#include "engine/cuda_exec.h"

namespace ejk::ops {

// Bytes of p's summary at block_q x block_k tiles (0 without a dense mask).
size_t mask_tiles_bytes(const FlashFwdParams& p, int64_t block_q, int64_t block_k);

// Where the summary starts in a scratch whose first `used` bytes are another's: aligned up.
size_t mask_tiles_offset(size_t used);

// Launches lc's kernel `kernel` (the flash_mask_tiles companion) to classify p's dense mask into
// `dst` (mask_tiles_bytes of device memory), in stream order before the caller's kernels, and
// points p.mask_tiles there. No host synchronisation.
void launch_mask_tiles(engine::CudaLaunchContext& lc, size_t kernel, FlashFwdParams& p, int64_t block_q, int64_t block_k,
                       void* dst);

}  // namespace ejk::ops
