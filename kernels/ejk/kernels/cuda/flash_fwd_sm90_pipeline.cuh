// The sm_90a flash forward's pipeline between its producer and its consumer warpgroups
// (flash_fwd_sm90.cuh), on the op-free rings and record slot of sm90/ring.cuh: where a block's
// tiles, mbarriers and item record sit in shared memory, the producer's load hook that issues
// every TMA copy (and hands the consumers each work item's record), and the consumers' side of
// those hand-offs. The block's Config C (FlashFwdSm90Config) supplies the sizes and switches.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_sm90_schedule.cuh"
#include "ejk/kernels/cuda/ptx.cuh"
#include "ejk/kernels/cuda/sm90/pipeline.cuh"
#include "ejk/kernels/cuda/sm90/ring.cuh"

namespace ejk::cuda {

// Shared-memory layout of a block: the Q hand-off (a one-slot ring), the K and V rings (K and V
// released separately: S(t) frees K(t) long before P V frees V(t)), the item record and, with
// C::kBiasStaged, the consumer warps' bias barriers and boxes. Every barrier sits in one region
// from `bars` on: Q's two, K's, V's, the record's, then the bias warps'.
template <class C> struct Sm90Smem {
  using QRing = sm90::TmaRing<1, C::kQBytes>;
  using KVRing = sm90::TmaRing<C::kStages, C::kKVBytes>;
  QRing q;
  KVRing k, v;
  sm90::RecordSlot record;

  // From the 1024-byte aligned base: Q, the O tile (C::kOBytes, 0 without one), the K ring, the V
  // ring, then the barriers.
  __device__ __forceinline__ explicit Sm90Smem(u32 base) {
    const u32 kv = base + C::kQBytes + C::kOBytes;
    const u32 bars = kv + 2 * C::kStages * C::kKVBytes;
    q = {base, bars};
    k = {kv, bars + QRing::kBarrierBytes};
    v = {kv + C::kStages * C::kKVBytes, bars + QRing::kBarrierBytes + KVRing::kBarrierBytes};
    record = {bars + QRing::kBarrierBytes + 2 * KVRing::kBarrierBytes};
  }
  __device__ __forceinline__ u32 bars() const { return q.bars; }
  // The O tile (persistent blocks with C::kOBuffer) sits between Q and the K ring.
  __device__ __forceinline__ u32 o() const { return q.tiles + C::kQBytes; }
  // C::kBiasStaged: consumer warp w's bias barrier, after the item record, and the warps' staged
  // bias boxes, kBiasRegionOffset past the barriers (FlashFwdSm90Geometry::bias_stage_bytes).
  __device__ __forceinline__ u32 bias_full(int w) const {
    return bars() + u32(FlashFwdSm90Geometry::kBarrierBytes + FlashFwdSm90Geometry::kItemRecordBytes) +
           8 * w;
  }
  __device__ __forceinline__ u32 bias_rows() const {
    return bars() + u32(FlashFwdSm90Geometry::kBiasRegionOffset);
  }
  // Thread 0, before the block's first barrier: full barriers take the producer's one arrival
  // (with the byte count), empty ones every consumer warp's.
  __device__ __forceinline__ void init() const {
    q.init(4 * C::kConsumers);
    record.init();
    k.init(4 * C::kConsumers);
    v.init(4 * C::kConsumers);
    if constexpr (C::kBiasStaged)  // one per consumer warp: its lane 0's arrival and the bytes
      for (int w = 0; w < 4 * C::kConsumers; ++w) mbar_init(bias_full(w), 1);
  }
};

// The record of a work item (Sm90ItemRecord) as the slot's four words, and back.
__device__ __forceinline__ sm90::Words4 to_words(const Sm90ItemRecord& r) { return {r.z, r.h, r.hk, r.q0}; }
__device__ __forceinline__ Sm90ItemRecord from_words(const sm90::Words4& w) { return {w.x, w.y, w.z, w.w}; }

// The K (kV false) or V tile of key rows row .. row + block_k - 1 into ring slot st (the slot's
// `use`-th fill), once the consumers have released the slot's previous tile. Each box is 64
// columns of the tile's rows; a tile is kColBlocks boxes, counted on the slot's full barrier.
// The addresses are taken after the wait (the producer runs on 24 registers).
template <class C, bool kV>
__device__ __forceinline__ void sm90_load_kv_tile(const Sm90Smem<C>& sm,
                                                  const FlashFwdTensorMaps& maps, int st, u32 use,
                                                  int row, int hk, int b) {
  const typename Sm90Smem<C>::KVRing& ring = kV ? sm.v : sm.k;
  const u32 full = ring.begin_fill(st, use, C::kKVBytes);
#pragma unroll
  for (int c = 0; c < C::kColBlocks; ++c)
    tma_load_4d(ring.tile(st) + c * C::kBlockK * 128, kV ? &maps.v : &maps.k, full, c * 64, row,
                hk, b);
}

// The producer's load hook (sm90::produce_items): per item (and once more at the end of the
// block's work), once the consumers have released the previous item's Q, the item's record;
// then, for an item with visible keys, its Q, and K(t) and V(t) into ring slot (running tile
// count) % kStages as soon as the consumers have released that slot's previous tile.
template <class C> struct Sm90Loader {
  const FlashFwdParams& p;
  const FlashFwdTensorMaps& maps;
  const Sm90Smem<C>& sm;
  u32 kv = 0;       // K/V tiles issued so far: ring slot kv % kStages, its use kv / kStages
  u32 records = 0;  // Q phases so far: records (kItemRecord) or Q loads (each released on Q's empty)

  __device__ __forceinline__ void load(i64 item) {
    Sm90Block blk;
    if (!sm90_block<C>(p, item, blk)) return;  // nobody's item
    // Without records, an item with no visible keys takes no Q phase: no consumer waits.
    if (!C::kItemRecord && blk.tiles() == 0) return;
    if (records > 0) sm.q.wait_empty(0, (records - 1) & 1);
    ++records;
    // Built from blk (not kept beside it: the producer runs on 24 registers).
    if constexpr (C::kItemRecord)
      sm.record.publish(to_words(Sm90ItemRecord{u32(blk.seq.index), blk.h, blk.hk, blk.q0}));
    if (blk.tiles() == 0) return;
    const int b = int(blk.seq.b), h = int(blk.h), hk = int(blk.hk);
    const u32 q_full = sm.q.begin_fill(0, 0, C::kQBytes);  // Q's empty was waited for above
    const int q_row = int(blk.seq.q_begin + blk.q0);
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c)
      tma_load_4d(sm.q.tile(0) + c * C::kBlockQ * 128, &maps.q, q_full, c * 64, q_row, h, b);
    const int tiles = blk.tiles();
    // Not unrolled: one thread issuing asynchronous copies gains nothing from it, and NVVM's
    // unroll (+ remainder) lengthened the NVRTC compile.
#pragma unroll 1
    for (int t = 0; t < tiles; ++t, ++kv) {
      const int st = Sm90Smem<C>::KVRing::slot(kv);
      const u32 use = Sm90Smem<C>::KVRing::use(kv);
      const int k_row = int(blk.seq.k_begin + i64(blk.keys.begin + t) * C::kBlockK);
      sm90_load_kv_tile<C, false>(sm, maps, st, use, k_row, hk, b);
      sm90_load_kv_tile<C, true>(sm, maps, st, use, k_row, hk, b);
    }
  }

  // The end-of-work record, once the last item's Q is released.
  __device__ __forceinline__ void end() {
    if constexpr (C::kItemRecord) {
      if (records > 0) sm.q.wait_empty(0, (records - 1) & 1);
      sm.record.publish(to_words(Sm90ItemRecord{kSm90EndOfWork, 0, 0, 0}));
    }
  }
};

// Producer: one thread issues every copy, over the block's schedule. Blocks with item records
// and the causal order draw their items (a draw once the last item's loads are all issued: its
// latency hides behind the consumers' last kStages tiles of that item).
template <class C>
__device__ __forceinline__ void sm90_produce(const FlashFwdParams& p, const FlashFwdTensorMaps& maps,
                                             const Sm90Smem<C>& sm) {
  if (threadIdx.x != 0) return;
  tma_prefetch_map(&maps.q);
  tma_prefetch_map(&maps.k);
  tma_prefetch_map(&maps.v);
  const i64 total = sm90_total_items<C>(p);
  Sm90Loader<C> loader{p, maps, sm};
  if constexpr (C::kDrawItems)
    sm90::produce_items(sm90::Drawn{p.tile_counter, u32(total)}, loader);
  else
    sm90::produce_items(sm90_static_schedule<C>(total), loader);
  loader.end();
}

// The current item's record, once the producer has announced it (phase parity `parity`); the
// thread that later releases Q's slot is the one that read it (sm90::RecordSlot::read).
template <class C>
__device__ __forceinline__ Sm90ItemRecord sm90_read_record(const Sm90Smem<C>& sm, u32 parity) {
  return from_words(sm.record.read(parity));
}

// One arrival per consumer warp (the empty barriers count warps) once its wgmmas are done.
// Only after a use of what the warp read: the arrive does not wait for loads still in flight
// (ldmatrix of Q: docs/design/flash_fwd_cuda.md, "Correctness traps found"); wgmma waits and
// shuffles of a loaded value are uses.
__device__ __forceinline__ void sm90_release(u32 bar, int lane) {
  if (lane == 0) mbar_arrive(bar);
}

}  // namespace ejk::cuda
