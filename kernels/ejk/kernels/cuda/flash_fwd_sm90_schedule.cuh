// Work items of the sm_90a flash forward (flash_fwd_sm90.cuh): what a block's n-th item is, in
// which order persistent blocks take them (the L2-aware causal snake), and the problem an item
// stands for. Producer and consumers decode the same items from these functions.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_tile.cuh"

namespace ejk::cuda {

// One work item's problem: its sequence, head, q rows and key tiles.
struct Sm90Block {
  SeqSpan seq;
  u32 h, hk, q0;  // as in its Sm90ItemRecord
  int valid_q;
  MaskSpec mask;
  KeyRange keys;
  __device__ __forceinline__ int tiles() const { return keys.tile_end - keys.tile_begin; }
};

// K/V bytes one group of the causal order may keep live in L2 when the host gives none
// (FlashFwdParams::l2_kv_bytes == 0): about the H100/H200 L2 (50 MiB) less what Q and O stream.
inline constexpr i64 kSm90L2KvBytes = i64(48) << 20;
// The same for blocks that draw their items (kDrawItems): a draw balances the blocks whatever
// the group's size, so the group can shrink to about what the ~grid items in flight read. On
// an H100 the 48 MiB groups' K/V came back from DRAM: 8 MiB measured +18% (head_dim 64) and
// +27% (128) at causal 1k, +5-7% at 2k (docs/design/flash_fwd_cuda.md, "Schedules").
inline constexpr i64 kSm90DrawnL2KvBytes = i64(8) << 20;
// And for one block per item, whose blocks the hardware hands out as SMs free up: at head_dim
// 256 causal 2k / 4k / 8k 16 MiB read +5.3 / +8.0 / +9.6% over each pair's q blocks in turn,
// 8 MiB only +0.7..+1.2%.
inline constexpr i64 kSm90PerItemL2KvBytes = i64(16) << 20;

// Causal order (kCausalOrder). Items are (q block, head, sequence); the (head, sequence)
// pairs are cut into groups of `group` pairs whose K and V fit the L2 budget together (whole
// GQA groups: the q heads of one kv head are neighbours), and a group's items run heaviest
// first (the last q blocks first, pairs fastest), so the ~grid items in flight share a few
// heads' K/V instead of each reading its own from DRAM. Each group is padded to whole rounds
// of gridDim.x items (the padding items are empty) and the blocks deal the rounds in a snake
// (odd rounds reversed, the parity running on across groups): block sums of work stay within a
// few percent of each other while a group spans >= ~3 rounds, which the 48 MiB default gives
// at every head_dim (24 / 12 MiB cost 27-33% at head_dim 256). Drawn items and one block per
// item (kUnpaddedOrder) run through the groups unpadded, in any size, the short group
// (pairs % group) first: last, its heavy items started in the last wave (24 MiB groups at
// head_dim 256 causal: +3.0 / +6.2 / +7.1 / +7.5% at 1k / 2k / 4k / 8k; the default budgets
// divide the benchmark grid evenly). Details: docs/design/flash_fwd_cuda.md, "Schedules".
// 32-bit arithmetic (item counts are far below 2^32): 64-bit divisions are long code or
// calls, and the producer runs on 24 registers.
struct Sm90CausalOrder {
  u32 pairs, q_blocks, group;  // (head, sequence) pairs, q blocks per pair, pairs per group
  u32 rounds;                  // rounds of gridDim.x items per full group
};

template <class C>
__device__ __forceinline__ Sm90CausalOrder sm90_causal_order(const FlashFwdParams& p) {
  Sm90CausalOrder o;
  o.pairs = u32(p.heads_q * p.batch);
  o.q_blocks = u32(ceil_div<i64>(p.seqlen_q, C::kBlockQ));
  // In units of 256 B (K plus V of one key row of 64 columns; head_dim is a multiple of 64).
  const i64 fallback = C::kDrawItems     ? kSm90DrawnL2KvBytes
                       : C::kPersistent ? kSm90L2KvBytes
                                        : kSm90PerItemL2KvBytes;
  const i64 budget = (p.l2_kv_bytes > 0 ? p.l2_kv_bytes : fallback) >> 8;
  const u32 kv_head = max_of<u32>(1, u32(p.seqlen_k) * u32(C::kHeadDim / 64));
  const u32 kv_heads = max_of<u32>(1, u32(min_of<i64>(budget, 0xffffffffll)) / kv_head);
  o.group = min_of<u32>(o.pairs, kv_heads * (u32(p.heads_q) / u32(p.heads_kv)));
  // Only where the ungrouped order has fewer than 4 items of a pair in flight (pairs > grid / 4),
  // i.e. reads most K/V tiles from DRAM: with more, it shares them in L2 already and the groups
  // measured 1-7% slower (S >= 8k, head_dim 128 and 256). Persistent grids
  // only: one block per item has a grid of every item.
  if (C::kPersistent && 4 * o.pairs <= gridDim.x) o.group = o.pairs;
  o.rounds = ceil_div<u32>(o.group * o.q_blocks, gridDim.x);
  return o;
}

// The n-th work item of this block, or -1 past its last. One block per item: blockIdx.x (the
// grid is 1-D). Persistent: round n's items n * grid .. + grid - 1;
// the causal order's (padded, see above) in a snake: odd rounds reversed. Otherwise blocks of
// three consumers rotate by one slot per round: where the grid is a multiple of the q blocks
// per head (132 SMs, 1k rows in 192-row blocks: 6) a fixed slot gave each block one q block
// for the whole launch, and the short last ones (64 rows, which sm90_pass_item makes cheap) all
// to 22 blocks (d64 192 x 128 non-causal 1k: +5.6..+7.8% with sm90_pass_item). Two consumers
// keep the fixed slot (their partial items cost a full one; rotated, d128 128 x 128 read -1.3%).
template <class C>
__device__ __forceinline__ i64 sm90_item(i64 total, int n) {
  if constexpr (!C::kPersistent)
    return n == 0 ? i64(blockIdx.x) : -1;
  const u32 g = gridDim.x;
  u32 slot = blockIdx.x;
  if (C::kSnake && (n & 1)) slot = g - 1 - blockIdx.x;
  if (!C::kSnake && C::kConsumers == 3) slot = (blockIdx.x + u32(n)) % g;
  const i64 item = i64(n) * g + slot;
  return item < total ? item : -1;
}

// The next item of a block that draws its items (C::kDrawItems), or -1 once the order is used
// up (`total` items). A block's first item is its own index, so no atomic stands before the
// launch's first loads (the runtime's grid is at most the items; a block past them draws, and
// so still counts itself below). Later items are tickets from FlashFwdParams::tile_counter,
// offset by the grid. Every block stops at its first ticket past the end and then counts itself
// in counter[1]; the last one to do so knows every draw of the launch is done and zeroes both
// for the next launch on the stream. Without a counter, items n * grid + block (correct, not
// balanced).
__device__ __forceinline__ i64 sm90_draw(u32* counter, u32 total, int n) {
  if (counter == nullptr || (n == 0 && blockIdx.x < total)) {
    const u32 item = u32(n) * gridDim.x + blockIdx.x;
    return item < total ? i64(item) : -1;
  }
  // The shuffle (the producer thread is lane 0) tells ptxas the ticket is warp-uniform: the
  // decode then stays in uniform registers, as the snake's does. Straight from the atomic it
  // went to the 24 regular ones and the producer spilled 124-132 B.
  const u32 ticket = gridDim.x + __shfl_sync(1u, atomicAdd(counter, 1u), 0);
  if (ticket < total) return ticket;
  __threadfence();  // this block's last draw before its count
  if (atomicAdd(counter + 1, 1u) == gridDim.x - 1) {
    __threadfence();  // every block's last draw before the reset
    atomicExch(counter, 0u);
    atomicExch(counter + 1, 0u);
  }
  return -1;
}

// What the producer hands the consumers for one work item (Sm90Smem::record, announced on
// record_full ahead of the item's Q; persistent blocks of one or two consumers, kItemRecord):
// the sequence, the heads and the first query row, so that the consumers skip the decode
// below (three 32-bit divisions and the causal order's arithmetic per item: ~6% of the
// consumer warps' samples at head_dim 64 causal 1k). z == kSm90EndOfWork: no more items.
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
  blk.mask = variant_mask<C>(p);
  blk.keys = key_range<C>(blk.mask, blk.q0, blk.seq.len_k);
  return true;
}

// Work item -> its record; false when the item pads a group of the causal order. Items are
// (q block, q head, sequence) with q blocks fastest and the last q block first (heaviest
// under a causal mask); the causal order goes group by group, q blocks slowest.
template <class C>
__device__ __forceinline__ bool sm90_decode(const FlashFwdParams& p, i64 item, Sm90ItemRecord& r) {
  // 32-bit: item counts are far below 2^32, and 64-bit divisions are long code.
  u32 qb, hz, q_blocks;
  if constexpr (C::kCausalOrder) {
    const Sm90CausalOrder o = sm90_causal_order<C>(p);
    q_blocks = o.q_blocks;
    u32 it = u32(item), first_pair = 0, pairs_c = o.group;
    if constexpr (C::kUnpaddedOrder) {
      // Pairs that are no multiple of the group leave a short group: it goes first, so that
      // its heavy items do not start in the last wave (whole GQA groups still: both the pairs
      // and the group are multiples of the GQA ratio).
      const u32 rest = o.pairs % o.group, short_items = rest * o.q_blocks;
      if (it < short_items) {
        pairs_c = rest;
      } else {
        it -= short_items;
        const u32 per_group = o.group * o.q_blocks, c = it / per_group;
        it -= c * per_group;
        first_pair = rest + c * o.group;
      }
    } else {
      const u32 per_group = o.rounds * gridDim.x, c = it / per_group;
      it -= c * per_group;
      first_pair = c * o.group;
      pairs_c = min_of<u32>(o.group, o.pairs - first_pair);  // the last may be short
      if (it >= pairs_c * o.q_blocks) return false;           // padding
    }
    qb = it / pairs_c;
    hz = first_pair + (it - qb * pairs_c);
  } else {
    q_blocks = u32(ceil_div<i64>(p.seqlen_q, C::kBlockQ));
    hz = u32(item) / q_blocks;
    qb = u32(item) - hz * q_blocks;
  }
  const u32 heads_q = u32(p.heads_q), b = hz / heads_q;
  r.z = b;
  r.h = hz - b * heads_q;
  r.hk = r.h / (heads_q / u32(p.heads_kv));
  r.q0 = (q_blocks - 1 - qb) * u32(C::kBlockQ);
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
    const Sm90CausalOrder o = sm90_causal_order<C>(p);
    if (C::kDrawItems) return i64(o.pairs) * o.q_blocks;
    const u32 full = o.pairs / o.group, rest = o.pairs - full * o.group;
    return (i64(full) * o.rounds + ceil_div<u32>(rest * o.q_blocks, gridDim.x)) * gridDim.x;
  }
  return ceil_div<i64>(p.seqlen_q, C::kBlockQ) * p.heads_q * p.batch;
}

}  // namespace ejk::cuda
