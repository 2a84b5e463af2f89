// CUDA page_attention (semantics: common/page_attention_params.h): memory-bound decode.
//
// One block of kPageThreads threads per (sequence, kv head, group of up to kPageMaxGroup query
// heads, split); block index x = ((s * Hkv + g) * head_groups + c) * splits + k. The block
// walks its positions in tiles of kPageTile: the tile's K and V rows are copied into shared
// memory in 16-byte chunks (consecutive threads, consecutive chunks of a page's contiguous
// rows), so every page is read from memory once for the whole GQA group; then
//   scores:  thread (position i, half) dots its half of K row i with every head's query;
//   softmax: warp w takes heads w, w + 4, ...: the tile max, the rescale, exp of the scores;
//   values:  thread items (head, 16-byte chunk of D) accumulate sum_i p_i v_i in registers.
// K rows are padded by one chunk in shared memory so that a warp's row-strided reads of the
// score phase fall in distinct banks. Positions outside the block's range load as zeros.
// With splits > 1 the block writes its normalized partial and log-sum-exp in f32 and
// page_combine merges them.
#pragma once
#include "ejk/kernels/common/page_attention_params.h"
#include "ejk/kernels/cuda/page_decode_tc.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

template <Elem E> struct PageStorage { using type = u16; };
template <> struct PageStorage<Elem::f32> { using type = float; };

template <Elem E> __device__ __forceinline__ float page_to_f32(typename PageStorage<E>::type x) {
  if constexpr (E == Elem::f32) return x;
  else return to_f32<E>(x);
}

// Cfg: E, kD.
template <class Cfg> struct PageShape {
  using St = typename PageStorage<Cfg::E>::type;
  static constexpr int kChunkElems = 16 / int(sizeof(St));
  static constexpr int kChunks = (Cfg::kD + kChunkElems - 1) / kChunkElems;
  static constexpr int kRow = kChunks * kChunkElems;  // a V row in shared memory, elements
  static constexpr int kKRow = kRow + kChunkElems;    // a K row: one chunk of padding
  static constexpr int kItems = (kPageMaxGroup * kChunks + kPageThreads - 1) / kPageThreads;
  static constexpr int kHalf = kChunks / 2;  // score phase: chunks [0, kHalf) and [kHalf, kChunks)
};

// Chunk c of a cache row at `src` (element offset of the row) into 16 bytes at dst; elements
// past D are 0. vec: the row and its base allow one 16-byte load.
template <class Cfg>
__device__ __forceinline__ void page_copy_chunk(uint4* dst, const void* base, i64 src, int c, bool vec) {
  using S = PageShape<Cfg>;
  using St = typename S::St;
  const St* row = static_cast<const St*>(base) + src;
  if (vec) {
    *dst = *reinterpret_cast<const uint4*>(row + c * S::kChunkElems);
    return;
  }
  alignas(16) St x[S::kChunkElems];
#pragma unroll
  for (int e = 0; e < S::kChunkElems; ++e) {
    const int d = c * S::kChunkElems + e;
    x[e] = d < Cfg::kD ? row[d] : St(0);
  }
  *dst = *reinterpret_cast<const uint4*>(x);
}

template <class Cfg>
__device__ __forceinline__ void page_chunk_f32(const uint4& raw, float (&x)[PageShape<Cfg>::kChunkElems]) {
  using S = PageShape<Cfg>;
  const typename S::St* e = reinterpret_cast<const typename S::St*>(&raw);
#pragma unroll
  for (int i = 0; i < S::kChunkElems; ++i) x[i] = page_to_f32<Cfg::E>(e[i]);
}

// Writes chunk c of one output row (acc * inv) in the output's dtype; elements past D are skipped.
template <class Cfg>
__device__ __forceinline__ void page_store_chunk(typename PageShape<Cfg>::St* o, const float* acc, float inv, int c) {
  using S = PageShape<Cfg>;
#pragma unroll
  for (int e = 0; e < S::kChunkElems; ++e) {
    const int d = c * S::kChunkElems + e;
    if (d >= Cfg::kD) continue;
    const float y = acc[e] * inv;
    if constexpr (Cfg::E == Elem::f32) o[d] = y;
    else o[d] = typename S::St(pack2<Cfg::E>(y, 0.0f) & 0xffffu);
  }
}

template <class Cfg>
__device__ __forceinline__ void page_attention(const PageAttentionParams& p) {
  using S = PageShape<Cfg>;
  using St = typename S::St;
  extern __shared__ __align__(16) unsigned char smem[];
  St* sk = reinterpret_cast<St*>(smem);
  St* sv = sk + kPageTile * S::kKRow;
  float* sq = reinterpret_cast<float*>(sv + kPageTile * S::kRow);  // [group][kRow], scaled
  float* ss = sq + kPageMaxGroup * S::kRow;                         // [2][group][tile]
  float* sm = ss + 2 * kPageMaxGroup * kPageTile;                   // running max per head
  float* sl = sm + kPageMaxGroup;                                   // running sum
  float* sa = sl + kPageMaxGroup;                                   // this tile's rescale

  const int tid = threadIdx.x;
  const PageBlock pb = page_block(p);
  const i64 s = pb.s, g = pb.g, h0 = pb.h0, split = pb.split, begin = pb.begin, end = pb.end;
  const int nh = pb.nh;

  for (int x = tid; x < kPageMaxGroup * S::kRow; x += kPageThreads) {
    const int h = x / S::kRow, d = x % S::kRow;
    float v = 0.0f;
    if (h < nh && d < Cfg::kD) v = page_to_f32<Cfg::E>(static_cast<const St*>(p.q)[s * p.q_ss + (h0 + h) * p.q_sh + d]);
    sq[x] = v * p.scale;
  }
  if (tid < kPageMaxGroup) sm[tid] = neg_inf_f32(), sl[tid] = 0.0f;

  float acc[S::kItems][S::kChunkElems];
#pragma unroll
  for (int it = 0; it < S::kItems; ++it)
#pragma unroll
    for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] = 0.0f;

  const bool vec = p.vec != 0;
  const u32 bs = u32(p.block_size);
  for (i64 t0 = begin; t0 < end; t0 += kPageTile) {
    const int n = int(min_of((i64)kPageTile, end - t0));
    __syncthreads();  // the previous tile's rows are no longer read (and q, m, l are set)
    for (int x = tid; x < kPageTile * S::kChunks; x += kPageThreads) {
      const int i = x / S::kChunks, c = x % S::kChunks;
      uint4* dk = reinterpret_cast<uint4*>(sk + i * S::kKRow + c * S::kChunkElems);
      uint4* dv = reinterpret_cast<uint4*>(sv + i * S::kRow + c * S::kChunkElems);
      if (i < n) {
        const u32 j = u32(t0 + i);
        const i64 blk = page_block(p, s, j), slot = j % bs;
        page_copy_chunk<Cfg>(dk, p.k_cache, blk * p.k_sb + g * p.k_sh + slot * p.k_st, c, vec);
        page_copy_chunk<Cfg>(dv, p.v_cache, blk * p.v_sb + g * p.v_sh + slot * p.v_st, c, vec);
      } else {
        *dk = make_uint4(0, 0, 0, 0), *dv = make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();
    {  // scores: position i = tid % tile, chunks of one half
      const int i = tid % kPageTile, half = tid / kPageTile;
      float dot[kPageMaxGroup];
#pragma unroll
      for (int h = 0; h < kPageMaxGroup; ++h) dot[h] = 0.0f;
      const int c0 = half == 0 ? 0 : S::kHalf, c1 = half == 0 ? S::kHalf : S::kChunks;
      for (int c = c0; c < c1; ++c) {
        float kx[S::kChunkElems];
        page_chunk_f32<Cfg>(*reinterpret_cast<const uint4*>(sk + i * S::kKRow + c * S::kChunkElems), kx);
#pragma unroll
        for (int h = 0; h < kPageMaxGroup; ++h) {
          if (h >= nh) break;
          const float* qh = sq + h * S::kRow + c * S::kChunkElems;
#pragma unroll
          for (int e = 0; e < S::kChunkElems; ++e) dot[h] += qh[e] * kx[e];
        }
      }
#pragma unroll
      for (int h = 0; h < kPageMaxGroup; ++h)
        if (h < nh) ss[(half * kPageMaxGroup + h) * kPageTile + i] = dot[h];
    }
    __syncthreads();
    {  // softmax: warp w, heads w, w + 4, ...; lane l, positions l and l + 32
      const int warp = tid / 32, lane = tid % 32;
      for (int h = warp; h < nh; h += kPageThreads / 32) {
        float x[kPageTile / 32];
        float mt = sm[h];
#pragma unroll
        for (int r = 0; r < kPageTile / 32; ++r) {
          const int i = lane + 32 * r;
          float v = ss[h * kPageTile + i] + ss[(kPageMaxGroup + h) * kPageTile + i];
          if (p.softcap > 0.0f) v = p.softcap * tanhf(v / p.softcap);
          x[r] = i < n ? v : neg_inf_f32();
          mt = fmaxf(mt, x[r]);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
        float sum = 0.0f;  // mt is finite: the tile has a position
#pragma unroll
        for (int r = 0; r < kPageTile / 32; ++r) {
          const float e = expf(x[r] - mt);
          ss[h * kPageTile + lane + 32 * r] = e;
          sum += e;
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        __syncwarp();
        if (lane == 0) {
          const float alpha = expf(sm[h] - mt);
          sa[h] = alpha, sl[h] = sl[h] * alpha + sum, sm[h] = mt;
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int it = 0; it < S::kItems; ++it) {  // values: item (head, chunk)
      const int x = tid + it * kPageThreads, h = x / S::kChunks, c = x % S::kChunks;
      if (h >= nh) continue;
      const float alpha = sa[h];
#pragma unroll
      for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] *= alpha;
      for (int i = 0; i < n; ++i) {
        const float w = ss[h * kPageTile + i];
        float vx[S::kChunkElems];
        page_chunk_f32<Cfg>(*reinterpret_cast<const uint4*>(sv + i * S::kRow + c * S::kChunkElems), vx);
#pragma unroll
        for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] += w * vx[e];
      }
    }
  }
  __syncthreads();  // m and l of the last tile
#pragma unroll
  for (int it = 0; it < S::kItems; ++it) {
    const int x = tid + it * kPageThreads, h = x / S::kChunks, c = x % S::kChunks;
    if (h >= nh) continue;
    const float l = sl[h], inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible position: 0
    const i64 head = h0 + h;
    if (p.splits > 1) {
      const i64 row = (split * p.seqs + s) * p.q_heads + head;
      float* o = p.part_out + row * p.head_dim;
#pragma unroll
      for (int e = 0; e < S::kChunkElems; ++e) {
        const int d = c * S::kChunkElems + e;
        if (d < Cfg::kD) o[d] = acc[it][e] * inv;
      }
      if (c == 0) p.part_lse[row] = l > 0.0f ? sm[h] + logf(l) : neg_inf_f32();
    } else {
      page_store_chunk<Cfg>(static_cast<St*>(p.out) + s * p.o_ss + head * p.o_sh, acc[it], inv, c);
    }
  }
}

// A variant's entry: the tensor-core decode where page_uses_tc holds (the host sizes the shared
// memory by the same test), else the kernel above.
template <class Cfg>
__device__ __forceinline__ void page_attention_entry(const PageAttentionParams& p) {
  if constexpr (Cfg::E != Elem::f32 && Cfg::kD % 16 == 0 && Cfg::kD <= 256) {
    if (p.vec != 0) {
      page_decode_tc<Cfg>(p);
      return;
    }
  }
  page_attention<Cfg>(p);
}

// Merges the splits of every (sequence, head) row into out: a warp per row, lanes over D, by
// merge_states_params.h's rule over n parts (weights exp(lse_k - max); all -inf: 0).
template <Elem E>
__device__ __forceinline__ void page_combine(const PageAttentionParams& p) {
  using St = typename PageStorage<E>::type;
  const i64 rows = p.seqs * p.q_heads;
  const int lane = threadIdx.x % 32;
  for (i64 row = (i64(blockIdx.x) * kPageCombineThreads + threadIdx.x) / 32; row < rows;
       row += i64(gridDim.x) * (kPageCombineThreads / 32)) {
    float m = neg_inf_f32();
    for (i64 k = 0; k < p.splits; ++k) m = fmaxf(m, p.part_lse[k * rows + row]);
    const i64 s = row / p.q_heads, h = row % p.q_heads;
    St* o = static_cast<St*>(p.out) + s * p.o_ss + h * p.o_sh;
    float total = 0.0f;
    if (m != neg_inf_f32())
      for (i64 k = 0; k < p.splits; ++k) total += expf(p.part_lse[k * rows + row] - m);
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;
    for (i64 d = lane; d < p.head_dim; d += 32) {
      float y = 0.0f;
      if (total > 0.0f)
        for (i64 k = 0; k < p.splits; ++k) {
          const float w = expf(p.part_lse[k * rows + row] - m);
          if (w > 0.0f) y += w * p.part_out[(k * rows + row) * p.head_dim + d];  // an empty split is not read
        }
      y *= inv;
      if constexpr (E == Elem::f32) o[d] = y;
      else o[d] = St(pack2<E>(y, 0.0f) & 0xffffu);
    }
  }
}

}  // namespace ejk::cuda
