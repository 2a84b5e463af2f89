// Phase probe of the sm_90a flash forward (flash_fwd_sm90.cuh), for tuning builds only.
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// Tuning builds (-DEJK_SM90_PROBE, bench only; compiles to nothing otherwise). Per block:
// globaltimer at entry and at the consumers' end, and the SM it ran on (the gaps between blocks
// on one SM, the tail); per item and consumer warpgroup: clock64 spent filling the pipeline
// (entry to S(0) done), in the tile loop, and in the epilogue (bench_flash.cu prints them).
#if defined(EJK_SM90_PROBE)
inline constexpr int kProbeBlocks = 1 << 16;
static __device__ unsigned long long ejk_sm90_probe[3 * kProbeBlocks];  // start, end, smid
// fill, loop, finish + lse, O staged in shared memory, O stores, items, tiles
static __device__ unsigned long long ejk_sm90_phases[8];
__device__ __forceinline__ u64 globaltimer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ u64 clock_cycles() {
  u64 t;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
  return t;
}
__device__ __forceinline__ u32 sm_id() {
  u32 r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
#endif

struct Sm90PhaseProbe {
#if defined(EJK_SM90_PROBE)
  u32 last;  // 32-bit clock: one register across the tile loop (ptxas spilled with four u64)
  __device__ __forceinline__ void mark(int i) {
    const u32 now = u32(clock_cycles());
    if (i > 0 && (threadIdx.x & 127) == 0) atomicAdd(&ejk_sm90_phases[i - 1], u64(now - last));
    last = now;
  }
  __device__ __forceinline__ void commit(int tiles) const {
    if ((threadIdx.x & 127) != 0) return;
    atomicAdd(&ejk_sm90_phases[5], 1ull);
    atomicAdd(&ejk_sm90_phases[6], (unsigned long long)tiles);
  }
#else
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void commit(int) const {}
#endif
};

}  // namespace ejk::cuda
