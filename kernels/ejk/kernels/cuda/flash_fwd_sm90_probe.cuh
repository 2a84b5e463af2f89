// Phase probe of the sm_90a flash forward (flash_fwd_sm90.cuh), for tuning builds only.
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// Tuning builds (-DEJK_SM90_PROBE, bench only; compiles to nothing otherwise). Per block:
// globaltimer at entry and at the consumers' end, and the SM it ran on (the gaps between blocks
// on one SM, the tail); per item and consumer warpgroup: the clock64 cycles of each phase
// below (bench_flash.cu prints them). Phases of one item, in order (each mark adds the cycles
// since the previous one).
enum Sm90ProbePhase : int {
  kProbeQWait,   // entry to the Q tile landed
  kProbeKWait,   // to the first K tile landed
  kProbeTurn,    // to the ping-pong turn
  kProbeS0,      // S(0) issued and done
  kProbeLoop,    // the tile loop, up to the last P V's issue
  kProbeFinish,  // finish_rows + lse (while the last P V runs)
  kProbeStage,   // the last P V's wait and O staged in shared memory
  kProbeStore,   // O stores issued
  kProbeItems,   // counters: items, tiles
  kProbeTiles,
  kProbeCount
};
#if defined(EJK_SM90_PROBE)
inline constexpr int kProbeBlocks = 1 << 16;
static __device__ unsigned long long ejk_sm90_probe[3 * kProbeBlocks];  // start, end, smid
static __device__ unsigned long long ejk_sm90_phases[kProbeCount];
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
  __device__ __forceinline__ void start() { last = u32(clock_cycles()); }
  __device__ __forceinline__ void mark(Sm90ProbePhase ended) {
    const u32 now = u32(clock_cycles());
    if ((threadIdx.x & 127) == 0) atomicAdd(&ejk_sm90_phases[ended], u64(now - last));
    last = now;
  }
  __device__ __forceinline__ void commit(int tiles) const {
    if ((threadIdx.x & 127) != 0) return;
    atomicAdd(&ejk_sm90_phases[kProbeItems], 1ull);
    atomicAdd(&ejk_sm90_phases[kProbeTiles], (unsigned long long)tiles);
  }
#else
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void mark(Sm90ProbePhase) {}
  __device__ __forceinline__ void commit(int) const {}
#endif
};

}  // namespace ejk::cuda
