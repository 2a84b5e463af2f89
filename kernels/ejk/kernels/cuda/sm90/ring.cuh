// Op-free sm_90a shared-memory rings filled by TMA copies: kStages slots of kTileBytes each,
// every slot with a full barrier (the producer's one arrival plus the bytes its copies carry)
// and an empty barrier (one arrival per consumer warp once it is done with the slot). The n-th
// tile of a stream lives in slot n % kStages; its fill is that slot's (n / kStages)-th, and the
// barriers' phase parity is that count's lowest bit. A one-slot ring is a single hand-off (a Q
// tile that stays while a work item runs).
//
// Addresses are shared-memory (32-bit) addresses; the ring holds the first tile's and the first
// barrier's, and derives the rest with constants (a producer on 24 registers keeps no more).
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda::sm90 {

template <int kStages, int kTileBytes> struct TmaRing {
  static_assert(kStages >= 1, "a ring has at least one slot");
  static constexpr int kStageCount = kStages;
  static constexpr int kBytes = kTileBytes;
  static constexpr u32 kBarrierBytes = 16 * kStages;  // full then empty barriers, 8 bytes each

  u32 tiles;  // slot 0's tile; slot st at tiles + st * kTileBytes
  u32 bars;   // full barriers [0, kStages), then empty barriers [kStages, 2 kStages)

  __device__ __forceinline__ u32 tile(int st) const { return tiles + st * kTileBytes; }
  __device__ __forceinline__ u32 full(int st) const { return bars + 8 * st; }
  __device__ __forceinline__ u32 empty(int st) const { return bars + 8 * (kStages + st); }

  // Slot, fill count and parity of a stream's n-th tile.
  static __device__ __forceinline__ int slot(u32 n) { return int(n % kStages); }
  static __device__ __forceinline__ u32 use(u32 n) { return n / kStages; }
  static __device__ __forceinline__ u32 parity(u32 n) { return (n / kStages) & 1; }

  // One thread, before the block's first __syncthreads: `consumer_warps` arrivals empty a slot.
  __device__ __forceinline__ void init(u32 consumer_warps) const {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(full(st), 1);
      mbar_init(empty(st), consumer_warps);
    }
  }

  // Producer: opens slot st's `use`-th fill once the consumers have released its previous tile,
  // announcing `bytes` of copies; returns the barrier the copies complete on. The address is
  // taken after the wait (one live register less across it).
  __device__ __forceinline__ u32 begin_fill(int st, u32 use, u32 bytes) const {
    if (use > 0) mbar_wait(empty(st), (use - 1) & 1);
    const u32 bar = full(st);
    mbar_arrive_expect_tx(bar, bytes);
    return bar;
  }

  // Consumer: slot st's fill of parity `ph` has landed.
  __device__ __forceinline__ void wait_full(int st, u32 ph) const { mbar_wait(full(st), ph); }
  __device__ __forceinline__ void wait_empty(int st, u32 ph) const { mbar_wait(empty(st), ph); }

  // Consumer warp: done with slot st (one arrival per warp, from lane 0). Only after a use of
  // what the warp read: an arrive does not wait for loads still in flight (a wgmma wait or a
  // shuffle of a loaded value is a use).
  __device__ __forceinline__ void release(int st, int lane) const {
    if (lane == 0) mbar_arrive(empty(st));
  }
};

// Four 32-bit words a producer hands every consumer for one work item (its decoded coordinates),
// through shared memory and a full barrier of its own, ahead of the item's tiles. The slot is
// reused once the consumers release whatever barrier the op ties it to (the producer waits there
// before publishing the next record).
struct Words4 {
  u32 x, y, z, w;
};

struct RecordSlot {
  u32 full_bar;  // the record's full barrier; the 16 record bytes follow 16 bytes after it
  __device__ __forceinline__ u32 words() const { return full_bar + 16; }
  __device__ __forceinline__ void init() const { mbar_init(full_bar, 1); }

  // Producer: write the record, then arrive (ordering the write before the consumers' reads).
  __device__ __forceinline__ void publish(const Words4& r) const {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(words()), "r"(r.x), "r"(r.y),
                 "r"(r.z), "r"(r.w)
                 : "memory");
    mbar_arrive(full_bar);
  }

  // Consumer warps: the record of parity `parity`. Lane 0 reads it and hands it round, so the
  // thread that later releases the slot is the one that read it (its release alone then orders
  // the read before the producer's next write).
  __device__ __forceinline__ Words4 read(u32 parity) const {
    mbar_wait(full_bar, parity);
    Words4 r{};
    if ((threadIdx.x & 31) == 0)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "r"(words())
                   : "memory");
    r.x = __shfl_sync(0xffffffffu, r.x, 0);
    r.y = __shfl_sync(0xffffffffu, r.y, 0);
    r.z = __shfl_sync(0xffffffffu, r.z, 0);
    r.w = __shfl_sync(0xffffffffu, r.w, 0);
    return r;
  }
};

}  // namespace ejk::cuda::sm90
