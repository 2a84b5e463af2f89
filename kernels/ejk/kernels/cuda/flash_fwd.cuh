// Entry point of the CUDA flash forward for a variant key: picks the kernel family from the
// key's target and tile shape (flash_fwd_uses_wgmma, shared with the host runtime), so the
// template stays a list of constants.
#pragma once
#include "ejk/kernels/cuda/arch.h"
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90.cuh"

namespace ejk::cuda {

// Dropout and dense-mask keys run the sm80 family on sm90a too (docs/design/dropout.md,
// dense_mask.md).
template <Arch A, Elem E, int D, int Br, int Bc, FlashFlags F,
          bool kWgmma = flash_fwd_uses_wgmma(A == Arch::sm90a && !F.dropout && !F.dense_mask, D, Br, Bc)>
struct FlashFwdKernel {
  using Config = FlashFwdSm80Config<E, D, Br, Bc, F>;
  static constexpr int kThreads = Config::kThreads;
  // The tensor maps are part of every flash kernel's signature; mma.sync loads with cp.async.
  static __device__ __forceinline__ void run(const FlashFwdParams& p, const FlashFwdTensorMaps&) {
    flash_fwd_sm80<Config>(p);
  }
};

template <Arch A, Elem E, int D, int Br, int Bc, FlashFlags F>
struct FlashFwdKernel<A, E, D, Br, Bc, F, true> {
  using Config = FlashFwdSm90Config<E, D, Br, Bc, F, true, 0, flash_fwd_schedule(F.per_item)>;
  static constexpr int kThreads = Config::kThreads;
  static __device__ __forceinline__ void run(const FlashFwdParams& p, const FlashFwdTensorMaps& maps) {
    flash_fwd_sm90<Config>(p, maps);
  }
};

}  // namespace ejk::cuda
