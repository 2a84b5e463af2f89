// Work items of the sm_90a flash forward (flash_fwd_sm90.cuh): which of the op-free schedules
// and orders (sm90/schedule.cuh) a block takes its items from, how large the causal order's L2
// groups are, and the problem an item stands for. Producer and consumers decode the same items
// from these functions.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_tile.cuh"
#include "ejk/kernels/cuda/sm90/schedule.cuh"

namespace ejk::cuda {

// One work item's problem: its sequence, head, q rows and key tiles.
struct Sm90Block {
  SeqSpan seq;
  u32 h, hk, q0;  // as in its Sm90ItemRecord
  int valid_q;
  MaskSpec mask;
  TileRange keys;
  __device__ __forceinline__ int tiles() const { return keys.end - keys.begin; }
};

// K/V bytes one group of the causal order may keep live in L2 when the host gives none
// (FlashFwdParams::l2_kv_bytes == 0): about the H100/H200 L2 (50 MiB) less what Q and O stream.
inline constexpr i64 kSm90L2KvBytes = i64(48) << 20;
// The same for blocks that draw their items (kDrawItems): a draw balances the blocks whatever
// the group's size, so the group can shrink to about what the ~grid items in flight read (the
// 48 MiB groups' K/V came back from DRAM; docs/design/flash_fwd_cuda.md, "Schedules").
inline constexpr i64 kSm90DrawnL2KvBytes = i64(8) << 20;
// And for one block per item, whose blocks the hardware hands out as SMs free up (16 MiB
// measured best at head_dim 256 causal: the doc's "Measured choices of the sm90a kernels").
inline constexpr i64 kSm90PerItemL2KvBytes = i64(16) << 20;

// Causal order (kCausalOrder): sm90::GroupedOrder over (head, sequence) pairs of q blocks, in
// groups whose K and V fit the L2 budget together (whole GQA groups: the q heads of one kv head
// are neighbours), so the ~grid items in flight share a few heads' K/V instead of each reading
// its own from DRAM. Persistent blocks deal the padded rounds in a snake; drawn items and one
// block per item (kUnpaddedOrder) run through the groups unpadded, the short group first
// (docs/design/flash_fwd_cuda.md, "Schedules", has the group sizes' measurements).
template <class C>
__device__ __forceinline__ sm90::GroupedOrder sm90_causal_order(const FlashFwdParams& p) {
  sm90::GroupedOrder o;
  o.pairs = u32(p.heads_q * p.batch);
  o.blocks = u32(ceil_div<i64>(p.seqlen_q, C::kBlockQ));
  // In units of 256 B (K plus V of one key row of 64 columns; head_dim is a multiple of 64).
  const i64 fallback = C::kDrawItems     ? kSm90DrawnL2KvBytes
                       : C::kPersistent ? kSm90L2KvBytes
                                        : kSm90PerItemL2KvBytes;
  const i64 budget = (p.l2_kv_bytes > 0 ? p.l2_kv_bytes : fallback) >> 8;
  const u32 kv_head = max_of<u32>(1, u32(p.seqlen_k) * u32(C::kHeadDim / 64));
  const u32 kv_heads = max_of<u32>(1, u32(min_of<i64>(budget, 0xffffffffll)) / kv_head);
  o.group = min_of<u32>(o.pairs, kv_heads * (u32(p.heads_q) / u32(p.heads_kv)));
  // Only where the ungrouped order has fewer than 4 items of a pair in flight (pairs > grid / 4),
  // i.e. reads most K/V tiles from DRAM; with more it shares them in L2 already. Persistent
  // grids only: one block per item has a grid of every item.
  if (C::kPersistent && 4 * o.pairs <= gridDim.x) o.group = o.pairs;
  o.rounds = ceil_div<u32>(o.group * o.blocks, gridDim.x);
  return o;
}

// The schedule a block takes its items from when it decodes them itself (never drawn): one
// block per item, or persistent rounds (a snake with the causal order; three consumers rotate
// by one slot per round, since a fixed slot gave a block the same short last q block each
// round, docs/design/flash_fwd_cuda.md, "Schedules").
template <class C> __device__ __forceinline__ auto sm90_static_schedule(i64 total) {
  if constexpr (!C::kPersistent)
    return sm90::PerItem{};
  else
    return sm90::Persistent<C::kSnake, C::kConsumers == 3>{total};
}

// What the producer hands the consumers for one work item (Sm90Smem::record, announced on
// record_full ahead of the item's Q; persistent blocks of one or two consumers, kItemRecord):
// the sequence, the heads and the first query row, so that the consumers skip the decode
// below (three 32-bit divisions and the causal order's arithmetic per item).
// z == kSm90EndOfWork: no more items.
struct Sm90ItemRecord {
  u32 z, h, hk, q0;
};
inline constexpr u32 kSm90EndOfWork = 0xffffffffu;

// The rest of a work item's problem from its record; false when its q block lies past its
// sequence (varlen).
template <class C>
__device__ __forceinline__ bool sm90_block_from(const FlashFwdParams& p, const Sm90ItemRecord& r,
                                                Sm90Block& blk) {
  blk.seq = sequence_span(p, r.z);
  blk.h = r.h;
  blk.hk = r.hk;
  blk.q0 = r.q0;
  if (blk.q0 >= blk.seq.len_q) return false;
  blk.valid_q = int(min_of<i64>(C::kBlockQ, blk.seq.len_q - blk.q0));
  blk.mask = variant_mask<C::kFlags>(p.mask);
  blk.keys = key_range<C>(blk.mask, blk.q0, blk.seq.len_k);
  return true;
}

// Work item -> its record; false when the item pads a group of the causal order. Items are
// (q block, q head, sequence) with q blocks fastest and the last q block first (heaviest
// under a causal mask); the causal order goes group by group, q blocks slowest.
template <class C>
__device__ __forceinline__ bool sm90_decode(const FlashFwdParams& p, i64 item, Sm90ItemRecord& r) {
  u32 qb, hz;  // q block, (head, sequence) pair
  if constexpr (C::kCausalOrder) {
    if (!sm90_causal_order<C>(p).template decode<!C::kUnpaddedOrder>(u32(item), qb, hz))
      return false;  // padding
  } else {
    sm90::decode_block_major(u32(item), u32(ceil_div<i64>(p.seqlen_q, C::kBlockQ)), qb, hz);
  }
  const u32 heads_q = u32(p.heads_q), b = hz / heads_q;
  r.z = b;
  r.h = hz - b * heads_q;
  r.hk = r.h / (heads_q / u32(p.heads_kv));
  r.q0 = qb * u32(C::kBlockQ);
  return true;
}

// Work item -> the block's problem; false when the item pads the causal order or its q block
// lies past its sequence.
template <class C>
__device__ __forceinline__ bool sm90_block(const FlashFwdParams& p, i64 item, Sm90Block& blk) {
  Sm90ItemRecord r;
  return sm90_decode<C>(p, item, r) && sm90_block_from<C>(p, r, blk);
}

// Items the blocks loop over: the snake counts its padding, drawn items do not.
template <class C> __device__ __forceinline__ i64 sm90_total_items(const FlashFwdParams& p) {
  if constexpr (C::kSnake) {
    const sm90::GroupedOrder o = sm90_causal_order<C>(p);
    if (C::kDrawItems) return i64(o.pairs) * o.blocks;
    return o.padded_total();
  }
  return ceil_div<i64>(p.seqlen_q, C::kBlockQ) * p.heads_q * p.batch;
}

}  // namespace ejk::cuda
