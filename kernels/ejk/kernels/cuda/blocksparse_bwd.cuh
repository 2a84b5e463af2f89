// Block-sparse attention backward on CUDA: flash attention's tensor-core backward
// (flash_bwd_tc.cuh: delta rows, dK/dV blocks, dQ blocks; the sink rows of flash_bwd.cuh) with
// the layout's walks. A dQ block walks its layout row as the forward does (BlockRowWalk,
// blocksparse_fwd.cuh); a dK/dV block (block_k keys of one kv head, inside one layout key block)
// walks, for each query head of its group, that head's layout column: a bitmap per head in
// shared memory, bit qb set when the layout lists (qb, kb), the tile classifier finds a pair
// visible by position for the block's keys, and (segments) the id ranges meet. Steps are the
// query tiles of set blocks inside the position range, head by head; no other Q/dO tile is
// loaded. Deterministic as flash's: every output element is written by one block.
#pragma once
#include "ejk/kernels/cuda/blocksparse_fwd.cuh"
#include "ejk/kernels/cuda/flash_bwd.cuh"

namespace ejk::cuda {

struct BlockColumnWalk {
  TileRange qt;        // the query tiles visible by position
  const u32* listed;   // shared memory: [group][words]
  i64 group;
  int tiles;           // query tiles per head (a head's steps)
  int tiles_per_block, words;

  // The first visited step at or after `step` (head-major: head * tiles + query tile), or the end.
  __device__ __forceinline__ i64 seek(i64 step) const {
    const i64 end = group * tiles;
    while (step < end) {
      const i64 j = step / tiles;
      const int t = max_of(int(step - j * tiles), qt.begin);
      if (t < qt.end) {
        const u32* bits_j = listed + j * words;
        const int qb = t / tiles_per_block;
        int w = qb >> 5;
        u32 bits = bits_j[w] & (~0u << (qb & 31));
        while (bits == 0 && ++w < words) bits = bits_j[w];
        if (bits != 0) {
          const int found = (w << 5) + __ffs(bits) - 1;
          const int at = found == qb ? t : found * tiles_per_block;
          if (at < qt.end) return j * tiles + at;
        }
      }
      step = (j + 1) * tiles;  // the next head's first tile
    }
    return end;
  }
  __device__ __forceinline__ i64 first() const { return seek(0); }
  __device__ __forceinline__ i64 next(i64 step) const { return seek(step + 1); }
  __device__ __forceinline__ bool done(i64 step) const { return step >= group * tiles; }
  __device__ __forceinline__ i64 head(i64 step) const { return step / tiles; }
  __device__ __forceinline__ int tile(i64 step) const { return int(step % tiles); }
  __device__ __forceinline__ i64 ordinal(i64, int n) const { return n; }
};

// Builds the dK/dV block's bitmaps at `bits` (bsa_column_bitmap_bytes) and returns its walk;
// C is the block's config (rows: keys), BQ its query tile. Every thread calls it; it ends with a
// barrier.
template <class C, int BQ>
__device__ __forceinline__ BlockColumnWalk bsa_column_walk(const BlocksparseLayout& l, const FlashFwdParams& f,
                                                           const MaskSpec& m, const SeqSpan& seq, i64 hk, i64 k0,
                                                           int valid_k, TileRange qt, u32* bits) {
  constexpr int kWarps = C::kThreads / 32;
  const i64 group = f.heads_q / f.heads_kv;
  const int nq = int(l.num_q_blocks), words = (nq + 31) >> 5;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 k_last = k0 + valid_k - 1, kb = k0 / l.block_k;
  // A lane per (head, query block): the layout byte and the tile classifier, a ballot per word.
  for (i64 i = warp; i < group * words; i += kWarps) {
    const i64 j = i / words;
    const int qb = int(i - j * words) * 32 + lane;
    const i64 q_first = i64(qb) * l.block_q;
    const unsigned char* col =
        l.mask == nullptr ? nullptr : l.mask + seq.b * l.stride_b + (hk * group + j) * l.stride_h + kb * l.stride_k;
    const bool on = qb < nq && (col == nullptr || col[qb * l.stride_q] != 0) &&
                    classify_tile(m, q_first, min_of<i64>(q_first + l.block_q, seq.len_q) - 1, k0, k_last,
                                  seq.len_k) != TileClass::masked;
    const u32 word = __ballot_sync(~0u, on);
    if (lane == 0) bits[i] = word;
  }
  if constexpr (C::kSegments) {
    if (f.q_segment_ids != nullptr) {
      __syncthreads();
      // A warp per listed (head, query block): its query ids against the block's key ids.
      const i32* q_ids = f.q_segment_ids + seq.index * f.q_seg_stride_b;
      const SegmentRange ks = warp_segment_range(f.kv_segment_ids + seq.index * f.kv_seg_stride_b, k0, k_last, lane);
      for (i64 i = warp; i < group * nq; i += kWarps) {
        const i64 j = i / nq;
        const int qb = int(i - j * nq);
        u32* word = bits + j * words + (qb >> 5);
        if (((*word >> (qb & 31)) & 1u) == 0) continue;
        const i64 q_first = i64(qb) * l.block_q;
        const SegmentRange qs =
            warp_segment_range(q_ids, q_first, min_of<i64>(q_first + l.block_q, seq.len_q) - 1, lane);
        const bool meet = qs.lo <= qs.hi && ks.lo <= ks.hi && qs.lo <= ks.hi && ks.lo <= qs.hi;
        if (lane == 0 && !meet) atomicAnd(word, ~(1u << (qb & 31)));
      }
    }
  }
  __syncthreads();
  return {qt, bits, group, int(ceil_div<i64>(seq.len_q, BQ)), int(l.block_q / BQ), words};
}

// Cfg: flash_bwd's (E, kD, kBlockQ, kBlockK, kFlags without bias and dropout). p.g.phase picks
// the launch: delta rows, dK/dV, dQ, sink rows.
template <class Cfg> __device__ void bsa_bwd(const BlocksparseBwdCudaParams& bp) {
  const FlashBwdParams& p = bp.g;
  if (blockIdx.x == 0 && threadIdx.x == 0 && p.phase == kBwdDelta && p.zero_dsoftmax_aux)
    *p.zero_dsoftmax_aux = 0.0f;  // the 0-d placeholder of an absent softmax_aux reads 0
  if (p.phase == kBwdDelta) {
    bwd_delta_rows<Cfg>(p);
  } else if (p.phase == kBwdKv) {
    bwd_kv_tc_walk<Cfg>(p, [&](const MaskSpec& m, const SeqSpan& seq, i64 hk, i64 k0, int valid_k, TileRange qt,
                               unsigned char* tail) {
      return bsa_column_walk<BwdKvConfig<Cfg>, Cfg::kBlockQ>(bp.layout, p.fwd, m, seq, hk, k0, valid_k, qt,
                                                             reinterpret_cast<u32*>(tail));
    });
  } else if (p.phase == kBwdQ) {
    bwd_q_tc_walk<Cfg>(p, [&](const MaskSpec& m, const SeqSpan& seq, i64 h, i64 q0, unsigned char* tail) {
      return bsa_row_walk<BwdQConfig<Cfg>>(bp.layout, p.fwd, m, seq, h, q0, reinterpret_cast<u32*>(tail));
    });
  } else if constexpr (Cfg::kFlags.sinks) {
    bwd_sink_task<Cfg>(p, blockIdx.x);
  }
}

}  // namespace ejk::cuda
