// Block-sparse attention forward on CUDA: the sm_80 flash forward (flash_fwd_sm80.cuh, mma.sync;
// it runs on sm_90a too) walking one layout row's key blocks instead of a range of key tiles.
//
// A block (kBlockQ queries of one q head and sequence; kBlockQ divides the layout's q block, so
// its queries lie in one layout row) first turns its row into two bitmaps in shared memory:
// `listed`, bit kb set when the layout lists block kb, the tile classifier finds a pair of it
// visible by position for these queries, and (segments) the id ranges of the two sides meet;
// `one_segment`, bit kb set when every pair of block kb lies in one valid segment. The walk then
// visits the kernel tiles (kBlockK divides the layout's k block) of listed blocks inside the
// position range, in increasing order; no other K/V tile is loaded. Within a visited tile the
// position mask is flash's (tile_needs_mask: only tiles that cut the band are masked per
// element) and mask_segments runs only on blocks without the one_segment bit.
#pragma once
#include "ejk/kernels/common/blocksparse_params.h"
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"

namespace ejk::cuda {

struct BlockRowWalk {
  TileRange r;             // the tiles visible by position (key_range)
  const u32* listed;       // shared memory, a bit per layout block
  const u32* one_segment;
  int tiles_per_block, words;

  // The first visited tile at or after `tile`, or r.end.
  __device__ __forceinline__ int seek(int tile) const {
    if (tile >= r.end) return r.end;
    const int kb = tile / tiles_per_block;
    int w = kb >> 5;
    u32 bits = listed[w] & (~0u << (kb & 31));
    while (bits == 0) {
      if (++w >= words) return r.end;
      bits = listed[w];
    }
    const int found = (w << 5) + __ffs(bits) - 1;
    return found == kb ? tile : min_of(found * tiles_per_block, r.end);
  }
  __device__ __forceinline__ int first() const { return seek(r.begin); }
  __device__ __forceinline__ int next(int tile) const { return seek(tile + 1); }
  __device__ __forceinline__ bool done(int tile) const { return tile >= r.end; }
  __device__ __forceinline__ int ordinal(int, int n) const { return n; }
  __device__ __forceinline__ bool mixed_segments(int tile) const {
    const int kb = tile / tiles_per_block;
    return ((one_segment[kb >> 5] >> (kb & 31)) & 1u) == 0;
  }
};

// The valid ids of ids[first, last] across a warp (every lane gets the result): lo > hi when
// none is valid; uniform when all are one valid id.
struct SegmentRange {
  i32 lo, hi;
  bool uniform;
};

__device__ __forceinline__ SegmentRange warp_segment_range(const i32* ids, i64 first, i64 last, int lane) {
  i32 lo = 0x7fffffff, hi = -0x7fffffff - 1;
  bool padding = false;
  for (i64 i = first + lane; i <= last; i += 32) {
    const i32 id = ids[i];
    if (id < 0) padding = true;
    else lo = min_of(lo, id), hi = max_of(hi, id);
  }
  lo = __reduce_min_sync(~0u, lo), hi = __reduce_max_sync(~0u, hi);
  padding = __any_sync(~0u, padding);
  return {lo, hi, !padding && lo == hi};
}

// Builds the block's bitmaps at `bits` (bsa_bitmap_bytes) and returns its walk. Every thread
// calls it; it ends with a barrier.
template <class C>
__device__ __forceinline__ BlockRowWalk bsa_row_walk(const BlocksparseLayout& l, const FlashFwdParams& p,
                                                     const MaskSpec& mask, const SeqSpan& seq, i64 h, i64 q0,
                                                     u32* bits) {
  constexpr int kWarps = C::kThreads / 32;
  const int nk = int(l.num_k_blocks), words = (nk + 31) >> 5;
  u32* listed = bits;
  u32* one_segment = bits + words;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 q_last = min_of<i64>(q0 + C::kBlockQ, seq.len_q) - 1;
  const unsigned char* row =
      l.mask == nullptr ? nullptr : l.mask + seq.b * l.stride_b + h * l.stride_h + (q0 / l.block_q) * l.stride_q;
  // A lane per block: the layout byte and the tile classifier, one ballot per 32 blocks.
  for (int w = warp; w < words; w += kWarps) {
    const int kb = w * 32 + lane;
    const i64 k_first = i64(kb) * l.block_k;
    const bool on = kb < nk && (row == nullptr || row[kb * l.stride_k] != 0) &&
                    classify_tile(mask, q0, q_last, k_first, k_first + l.block_k - 1, seq.len_k) !=
                        TileClass::masked;
    const u32 word = __ballot_sync(~0u, on);
    if (lane == 0) listed[w] = word, one_segment[w] = 0;
  }
  if constexpr (C::kSegments) {
    if (p.q_segment_ids != nullptr) {
      __syncthreads();
      // A warp per listed block: its key ids against the block's query ids, both coalesced.
      const i32* q_ids = p.q_segment_ids + seq.index * p.q_seg_stride_b;
      const i32* k_ids = p.kv_segment_ids + seq.index * p.kv_seg_stride_b;
      const SegmentRange qs = warp_segment_range(q_ids, q0, q_last, lane);
      for (int kb = warp; kb < nk; kb += kWarps) {
        if (((listed[kb >> 5] >> (kb & 31)) & 1u) == 0) continue;
        const i64 k_first = i64(kb) * l.block_k;
        const SegmentRange ks =
            warp_segment_range(k_ids, k_first, min_of<i64>(k_first + l.block_k, seq.len_k) - 1, lane);
        const bool meet = qs.lo <= qs.hi && ks.lo <= ks.hi && qs.lo <= ks.hi && ks.lo <= qs.hi;
        if (lane == 0) {
          if (!meet) atomicAnd(&listed[kb >> 5], ~(1u << (kb & 31)));
          else if (qs.uniform && ks.uniform && qs.lo == ks.lo) atomicOr(&one_segment[kb >> 5], 1u << (kb & 31));
        }
      }
    }
  }
  __syncthreads();
  return {key_range<C>(mask, q0, seq.len_k), listed, one_segment, int(l.block_k / C::kBlockK), words};
}

template <class C>
__device__ __forceinline__ void bsa_fwd_sm80(const BlocksparseFwdCudaParams& bp) {
  flash_fwd_sm80_walk<C>(bp.f, [&](const MaskSpec& mask, const SeqSpan& seq, i64 h, i64 q0, unsigned char* tail) {
    return bsa_row_walk<C>(bp.layout, bp.f, mask, seq, h, q0, reinterpret_cast<u32*>(tail));
  });
}

}  // namespace ejk::cuda
