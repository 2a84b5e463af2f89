// The sm_90a flash forward's pipeline between its producer and its consumer warpgroups
// (flash_fwd_sm90.cuh): where a block's tiles, mbarriers and item record sit in shared memory,
// the producer thread that issues every TMA copy (and hands the consumers each work item's
// record), and the consumers' side of those hand-offs. The block's Config C (FlashFwdSm90Config)
// supplies the sizes and switches.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_sm90_schedule.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// Shared-memory addresses of a block: Q, the K and V rings, and the mbarriers.
template <class C> struct Sm90Smem {
  u32 q, k, v, bars;
  // The O tile (persistent blocks with C::kOBuffer) sits between Q and the K ring; computed,
  // not stored: one more live register in the 24-register producer made ptxas spill.
  __device__ __forceinline__ u32 o() const { return q + C::kQBytes; }
  __device__ __forceinline__ u32 k_tile(int stage) const { return k + stage * C::kKVBytes; }
  __device__ __forceinline__ u32 v_tile(int stage) const { return v + stage * C::kKVBytes; }
  __device__ __forceinline__ u32 q_full() const { return bars; }
  __device__ __forceinline__ u32 q_empty() const { return bars + 8; }
  __device__ __forceinline__ u32 k_full(int st) const { return bars + 8 * (2 + st); }
  __device__ __forceinline__ u32 v_full(int st) const { return bars + 8 * (2 + C::kStages + st); }
  __device__ __forceinline__ u32 k_empty(int st) const {
    return bars + 8 * (2 + 2 * C::kStages + st);
  }
  __device__ __forceinline__ u32 v_empty(int st) const {
    return bars + 8 * (2 + 3 * C::kStages + st);
  }
  // The current item's record (Sm90ItemRecord) and its full barrier: the producer writes it
  // once the consumers have released the last item's Q tile (q_empty, which they do for an
  // item without a Q load too) and then arrives on record_full (ordering the write before the
  // consumers' reads), ahead of the item's Q: the consumers set up while Q is in flight.
  __device__ __forceinline__ u32 record_full() const { return bars + 8 * (2 + 4 * C::kStages); }
  __device__ __forceinline__ u32 record() const { return record_full() + 16; }
  // C::kBiasStaged: consumer warp w's bias barrier, after the item record, and the warps' staged
  // bias boxes, kBiasRegionOffset past the barriers (FlashFwdSm90Geometry::bias_stage_bytes).
  __device__ __forceinline__ u32 bias_full(int w) const {
    return bars + u32(FlashFwdSm90Geometry::kBarrierBytes + FlashFwdSm90Geometry::kItemRecordBytes) +
           8 * w;
  }
  __device__ __forceinline__ u32 bias_rows() const {
    return bars + u32(FlashFwdSm90Geometry::kBiasRegionOffset);
  }
};

__device__ __forceinline__ void st_shared_record(u32 addr, const Sm90ItemRecord& r) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n"
               ::"r"(addr), "r"(r.z), "r"(r.h), "r"(r.hk), "r"(r.q0) : "memory");
}
__device__ __forceinline__ Sm90ItemRecord ld_shared_record(u32 addr) {
  Sm90ItemRecord r;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.z), "=r"(r.h), "=r"(r.hk), "=r"(r.q0) : "r"(addr) : "memory");
  return r;
}

// The K (kV false) or V tile of key rows row .. row + block_k - 1 into ring slot st (the slot's
// `use`-th fill), once the consumers have released the slot's previous tile. Each box is 64
// columns of the tile's rows; a tile is kColBlocks boxes, counted on the slot's full barrier.
// The addresses are taken after the wait (the producer runs on 24 registers).
template <class C, bool kV>
__device__ __forceinline__ void sm90_load_kv_tile(const Sm90Smem<C>& sm,
                                                  const FlashFwdTensorMaps& maps, int st, u32 use,
                                                  int row, int hk, int b) {
  if (use > 0) mbar_wait(kV ? sm.v_empty(st) : sm.k_empty(st), (use - 1) & 1);
  const u32 full = kV ? sm.v_full(st) : sm.k_full(st);
  mbar_arrive_expect_tx(full, C::kKVBytes);
#pragma unroll
  for (int c = 0; c < C::kColBlocks; ++c)
    tma_load_4d((kV ? sm.v_tile(st) : sm.k_tile(st)) + c * C::kBlockK * 128,
                kV ? &maps.v : &maps.k, full, c * 64, row, hk, b);
}

// Producer: one thread issues every copy. Per item (and once more at the end of the block's
// work): once the consumers have released the previous item's Q, the item's record; then, for
// an item with visible keys, its Q, and K(t) and V(t) into ring slot (running tile count) %
// kStages as soon as the consumers have released that slot's previous tile.
template <class C>
__device__ __forceinline__ void sm90_produce(const FlashFwdParams& p, const FlashFwdTensorMaps& maps,
                                             const Sm90Smem<C>& sm) {
  if constexpr (C::kRegSplit) setmaxnreg_dec<C::kProducerRegs>();
  if (threadIdx.x != 0) return;
  tma_prefetch_map(&maps.q);
  tma_prefetch_map(&maps.k);
  tma_prefetch_map(&maps.v);
  const i64 total = sm90_total_items<C>(p);
  u32 kv = 0;       // K/V tiles issued so far: ring slot kv % kStages, its use kv / kStages
  u32 records = 0;  // Q phases so far: records (kItemRecord) or Q loads (each released on q_empty)
  for (int n = 0;; ++n) {
    // A draw once the last item's loads are all issued: its latency hides behind the
    // consumers' last kStages tiles of that item.
    const i64 item = C::kDrawItems ? sm90_draw(p.tile_counter, u32(total), n) : sm90_item<C>(total, n);
    if (item < 0) break;
    Sm90Block blk;
    if (!sm90_block<C>(p, item, blk)) continue;  // nobody's item
    // Without records, an item with no visible keys takes no Q phase: no consumer waits.
    if (!C::kItemRecord && blk.tiles() == 0) continue;
    if (records > 0) mbar_wait(sm.q_empty(), (records - 1) & 1);
    ++records;
    if constexpr (C::kItemRecord) {
      // Built from blk (not kept beside it: the producer runs on 24 registers).
      st_shared_record(sm.record(), Sm90ItemRecord{u32(blk.seq.index), blk.h, blk.hk, blk.q0});
      mbar_arrive(sm.record_full());
    }
    if (blk.tiles() == 0) continue;
    const int b = int(blk.seq.b), h = int(blk.h), hk = int(blk.hk);
    mbar_arrive_expect_tx(sm.q_full(), C::kQBytes);
    const int q_row = int(blk.seq.q_begin + blk.q0);
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c)
      tma_load_4d(sm.q + c * C::kBlockQ * 128, &maps.q, sm.q_full(), c * 64, q_row, h, b);
    const int tiles = blk.tiles();
    // Not unrolled: one thread issuing asynchronous copies gains nothing from it, and NVVM's
    // 4x unroll (+ remainder) was ~13% of a head_dim 128 key's NVRTC time.
#pragma unroll 1
    for (int t = 0; t < tiles; ++t, ++kv) {
      const int st = int(kv % C::kStages);
      const u32 use = kv / C::kStages;
      const int k_row = int(blk.seq.k_begin + i64(blk.keys.tile_begin + t) * C::kBlockK);
      sm90_load_kv_tile<C, false>(sm, maps, st, use, k_row, hk, b);
      sm90_load_kv_tile<C, true>(sm, maps, st, use, k_row, hk, b);
    }
  }
  if constexpr (C::kItemRecord) {
    if (records > 0) mbar_wait(sm.q_empty(), (records - 1) & 1);
    st_shared_record(sm.record(), Sm90ItemRecord{kSm90EndOfWork, 0, 0, 0});
    mbar_arrive(sm.record_full());
  }
}

// The current item's record, once the producer has announced it (phase parity `parity`). Lane 0
// of each warp reads it and hands it round: the thread that later releases the record
// (sm90_release on q_empty) is then the one that read it, so the read is ordered before the
// producer's next write by that release alone.
template <class C>
__device__ __forceinline__ Sm90ItemRecord sm90_read_record(const Sm90Smem<C>& sm, u32 parity) {
  mbar_wait(sm.record_full(), parity);
  Sm90ItemRecord r{};
  if ((threadIdx.x & 31) == 0) r = ld_shared_record(sm.record());
  r.z = __shfl_sync(0xffffffffu, r.z, 0);
  r.h = __shfl_sync(0xffffffffu, r.h, 0);
  r.hk = __shfl_sync(0xffffffffu, r.hk, 0);
  r.q0 = __shfl_sync(0xffffffffu, r.q0, 0);
  return r;
}

// One arrival per consumer warp (the empty barriers count warps) once its wgmmas are done.
// Only after a use of what the warp read: the arrive does not wait for loads still in flight
// (ldmatrix of Q: docs/design/flash_fwd_cuda.md, "Correctness traps found"); wgmma waits and
// shuffles of a loaded value are uses.
__device__ __forceinline__ void sm90_release(u32 bar, int lane) {
  if (lane == 0) mbar_arrive(bar);
}

}  // namespace ejk::cuda
