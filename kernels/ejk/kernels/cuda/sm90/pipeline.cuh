// Op-free sm_90a warp specialization: warpgroup 0 produces (one of its threads issues every TMA
// copy), warpgroups 1.. consume; the producer hands its registers to the consumers (setmaxnreg,
// which takes effect only with a register cap at entry, __launch_bounds__(threads, 1), and with
// each role one branch of a single if / else). The op supplies the hooks:
//   P::init()                      one thread, before the block's barrier: the mbarriers
//   P::load(item) per item         the producer thread: its copies
//   P::compute(item) per item      every consumer thread
//   P::finish()                    every consumer thread once the items are done
// and the schedule of items (sm90/schedule.cuh) decides which items a block runs. Ops that hand
// items over through a record (sm90/ring.cuh RecordSlot) drive their own loops from
// P::produce() / P::consume() instead; run_warp_specialized below is the same either way.
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda::sm90 {

// The split of the 64K-register file at one block per SM.
struct RegisterSplit {
  bool enabled;
  int producer, consumer;
};

// Runs P's roles: P::produce() in warpgroup 0 (with its registers lowered), P::consume() in the
// others (raised). init() runs on thread 0 before everyone's first barrier.
template <RegisterSplit kRegs, class P> __device__ __forceinline__ void run_warp_specialized(P& pipe) {
  if (threadIdx.x == 0) {
    pipe.init();
    fence_mbarrier_init();  // the TMA unit (async proxy) completes transactions on them
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    if constexpr (kRegs.enabled) setmaxnreg_dec<kRegs.producer>();
    pipe.produce();
  } else {
    if constexpr (kRegs.enabled) setmaxnreg_inc<kRegs.consumer>();
    pipe.consume();
  }
}

// The item loops over a schedule S (S::next(n): the block's n-th item, -1 past its last): the
// producer thread (the caller picks it) loads each item; the consumers compute it, then finish.
template <class S, class P> __device__ __forceinline__ void produce_items(const S& sched, P& pipe) {
  for (int n = 0;; ++n) {
    const i64 item = sched.next(n);
    if (item < 0) break;
    pipe.load(item);
  }
}

template <class S, class P> __device__ __forceinline__ void consume_items(const S& sched, P& pipe) {
  for (int n = 0;; ++n) {
    const i64 item = sched.next(n);
    if (item < 0) break;
    pipe.compute(item);
  }
  pipe.finish();
}

}  // namespace ejk::cuda::sm90
