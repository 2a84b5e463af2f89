// What the host's launch of the CUDA flash attention backward shares with its kernel
// (flash_bwd.cuh): the threads of a block, which are also the keys and queries of its tiles.
#pragma once

namespace ejk::cuda {
inline constexpr int kFlashBwdBlock = 32;
}  // namespace ejk::cuda
