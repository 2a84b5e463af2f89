// Op-free tile schedulers of sm_90a kernels, as types. A schedule says which work items (numbered
// 0 .. total - 1 by the op) a block runs: next(n) is the block's n-th, or -1 past its last.
//   PerItem          one block per item (blockIdx.x); the hardware hands blocks to SMs as they free
//   Persistent       one block per SM looping over rounds of gridDim.x items, optionally dealt in a
//                    snake (odd rounds reversed) or rotated by one slot per round
//   Drawn            persistent blocks that draw items from a counter in device memory
// and orders that map an item number to the op's coordinates:
//   GroupedOrder     items (block, pair) with pairs cut into groups that share the L2, the last
//                    blocks first (heaviest under a causal mask), groups padded to whole rounds
//                    or not; a forward's q blocks over (head, sequence) pairs
//   KeyMajorOrder    the backward adapter: items are (key block, pair), and a key block's query
//                    blocks run inner (attention_variant.h visible_query_tiles gives their range)
// 32-bit arithmetic throughout (item counts are far below 2^32): 64-bit divisions are long code
// or calls, and a producer runs on 24 registers.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk::cuda::sm90 {

struct PerItem {
  __device__ __forceinline__ i64 next(int n) const { return n == 0 ? i64(blockIdx.x) : -1; }
};

// kSnake: odd rounds reversed (block sums of a heaviest-first order even out); kRotate: slot
// (block + round) % grid (a fixed slot can give a block the same short item every round).
template <bool kSnake, bool kRotate> struct Persistent {
  i64 total;
  __device__ __forceinline__ i64 next(int n) const {
    const u32 g = gridDim.x;
    u32 slot = blockIdx.x;
    if (kSnake && (n & 1)) slot = g - 1 - blockIdx.x;
    if (!kSnake && kRotate) slot = (blockIdx.x + u32(n)) % g;
    const i64 item = i64(n) * g + slot;
    return item < total ? item : -1;
  }
};

// Items drawn from `counter` (two u32 of device memory, zero before a stream's first launch; the
// launch leaves them zero again). A block's first item is its own index, so no atomic stands
// before the launch's first loads (the grid is at most the items; a block past them draws, and
// so still counts itself below). Later items are tickets offset by the grid. Every block stops
// at its first ticket past the end and then counts itself in counter[1]; the last one to do so
// knows every draw of the launch is done and zeroes both for the next launch. Without a counter,
// items n * grid + block (correct, not balanced). Called by one thread (lane 0 of its warp).
struct Drawn {
  u32* counter;
  u32 total;
  __device__ __forceinline__ i64 next(int n) const {
    if (counter == nullptr || (n == 0 && blockIdx.x < total)) {
      const u32 item = u32(n) * gridDim.x + blockIdx.x;
      return item < total ? i64(item) : -1;
    }
    // The shuffle tells ptxas the ticket is warp-uniform: the decode then stays in uniform
    // registers. Straight from the atomic it went to the regular ones and a 24-register
    // producer spilled.
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
};

// Items (block, pair): `pairs` independent rows of `blocks` blocks each, cut into groups of
// `group` pairs that run together, blocks slowest inside a group and the last block first.
// Padded (kPadded): each group fills whole rounds of gridDim.x items (`rounds` per full group;
// the padding items decode to false), which a snake deals evenly. Unpadded (blocks that take
// items as they free up: drawn, or one block per item): groups back to back, the short group
// (pairs % group) first, so that its heavy items do not start in the last wave.
struct GroupedOrder {
  u32 pairs, blocks, group;
  u32 rounds;  // padded orders: rounds of gridDim.x items per full group

  template <bool kPadded>
  __device__ __forceinline__ bool decode(u32 item, u32& block, u32& pair) const {
    u32 it = item, first_pair = 0, pairs_c = group;
    if constexpr (!kPadded) {
      const u32 rest = pairs % group, short_items = rest * blocks;
      if (it < short_items) {
        pairs_c = rest;
      } else {
        it -= short_items;
        const u32 per_group = group * blocks, c = it / per_group;
        it -= c * per_group;
        first_pair = rest + c * group;
      }
    } else {
      const u32 per_group = rounds * gridDim.x, c = it / per_group;
      it -= c * per_group;
      first_pair = c * group;
      pairs_c = min_of<u32>(group, pairs - first_pair);  // the last may be short
      if (it >= pairs_c * blocks) return false;           // padding
    }
    const u32 b = it / pairs_c;
    pair = first_pair + (it - b * pairs_c);
    block = blocks - 1 - b;  // the last block first
    return true;
  }

  // Items a padded order's blocks loop over (padding counted).
  __device__ __forceinline__ i64 padded_total() const {
    const u32 full = pairs / group, rest = pairs - full * group;
    return (i64(full) * rounds + ceil_div<u32>(rest * blocks, gridDim.x)) * gridDim.x;
  }
};

// Items (block, pair) without grouping: blocks fastest, the last block first.
__device__ __forceinline__ void decode_block_major(u32 item, u32 blocks, u32& block, u32& pair) {
  pair = item / blocks;
  block = blocks - 1 - (item - pair * blocks);
}

// Backward adapter: items are (key block, pair), key blocks fastest in the natural order, and
// each item visits its query blocks [q_begin, q_end) inner (the causal / window range from
// attention_variant.h visible_query_tiles).
struct KeyMajorOrder {
  u32 key_blocks;
  __device__ __forceinline__ void decode(u32 item, u32& key_block, u32& pair) const {
    pair = item / key_blocks;
    key_block = item - pair * key_blocks;
  }
};

}  // namespace ejk::cuda::sm90
