// CUDA ragged paged attention (semantics: common/ragged_page_params.h), one kernel for
// ragged_page_attention_v2, prefill_page_attention and unified_attention (the cache layout is
// only strides).
//
// Grid: x = query block (then zero-fill blocks), y = (kv head, head group). A query block takes
// up to kRaggedRows rows (token, query head) of one sequence and one kv head: the GQA group's
// heads (up to 16) times as many of the sequence's tokens as fit, so each K/V page is read once
// per kv head for the whole group. Block x finds its sequence by a binary search over
// ragged_first_block (the starts stay on the device). The block walks the union of its rows'
// visible positions in tiles of kRaggedTile, two shared-memory stages deep (cp.async of the next
// tile's 16-byte chunks while the current one is computed); per tile, as page_attention.cuh:
//   scores:  thread (position i, half) dots its half of K row i with every row's query;
//   softmax: warp w takes rows w, w + 4, ...: each row's mask (span, window), bias, softcap,
//            then the online softmax in f32;
//   values:  thread items (row, 16-byte chunk of D) accumulate sum_i p_i v_i in registers.
// Zero-fill blocks write 0 to the tokens outside [query_start[0], query_start[active]). The
// log-sum-exp, when asked, is one thread's per row after the last tile. Blocks of one token
// (decode rows) take ragged_decode_tc.cuh's tensor-core path where page_uses_tc holds.
#pragma once
#include "ejk/kernels/common/ragged_page_params.h"
#include "ejk/kernels/cuda/page_attention.cuh"
#include "ejk/kernels/cuda/ragged_decode_tc.cuh"

namespace ejk::cuda {

// Shared-memory carve-up of one block (the sizes ragged_smem_bytes counts).
template <class Cfg> struct RaggedSmem {
  using S = PageShape<Cfg>;
  using St = typename S::St;
  static constexpr int kStage = kRaggedTile * (S::kKRow + S::kRow);  // elements of one K and V stage
  St* kv;                             // stage st: K rows at kv + st * kStage, then V rows
  float *q, *score, *m, *l, *alpha;  // q: [rows][kRow] scaled; score: [2][rows][tile]
  int *begin, *end, *qi;             // per row: visible positions [begin, end), query index

  __device__ explicit RaggedSmem(unsigned char* base) {
    kv = reinterpret_cast<St*>(base);
    q = reinterpret_cast<float*>(kv + 2 * kStage);
    score = q + kRaggedRows * S::kRow;
    m = score + 2 * kRaggedRows * kRaggedTile;
    l = m + kRaggedRows, alpha = l + kRaggedRows;
    begin = reinterpret_cast<int*>(alpha + kRaggedRows);
    end = begin + kRaggedRows, qi = end + kRaggedRows;
  }
  // Stage st's K and V rows (an offset, not an array a run-time index would put in local memory).
  __device__ St* k(int st) const { return kv + st * kStage; }
  __device__ St* v(int st) const { return kv + st * kStage + kRaggedTile * S::kKRow; }
};

// What a query block covers: sequence seq, its tokens [tok, tok + ntok) (query indices from
// qi0), heads [h0, h0 + nh) of kv head g; ntok == 0: nothing.
struct RaggedBlock {
  i64 seq, n_q, tok, qi0, ntok, g, h0, nh;
};

// Block row y's kv head and head group: heads [h0, h0 + nh) of kv head g.
__device__ __forceinline__ RaggedBlock ragged_heads(const RaggedPageParams& p) {
  const i64 group = p.q_heads / p.kv_heads, head_groups = ceil_div(group, p.cta_heads);
  const i64 g = blockIdx.y / head_groups, hg = blockIdx.y % head_groups;
  return {0, 0, 0, 0, 0, g, g * group + hg * p.cta_heads, min_of(p.cta_heads, group - hg * p.cta_heads)};
}

__device__ __forceinline__ RaggedBlock ragged_block(const RaggedPageParams& p, i64 x) {
  RaggedBlock b = ragged_heads(p);
  i64 local = x;
  if (p.decode != 0) {  // block x is sequence x's one query (q_blocks == S)
    b.seq = x, b.n_q = 1, b.tok = x, local = 0;
  } else if (p.query_start == nullptr) {
    b.n_q = p.tokens;
  } else {
    const i64 active = ragged_active_seqs(p);
    if (active == 0 || ragged_first_block(p, 0) > x) return b;
    i64 lo = 0, hi = active;  // the last sequence whose first block is at or before x
    while (hi - lo > 1) {
      const i64 mid = (lo + hi) / 2;
      if (ragged_first_block(p, mid) <= x) lo = mid; else hi = mid;
    }
    b.seq = lo, local = x - ragged_first_block(p, lo);
    b.n_q = max_of((i64)p.query_start[lo + 1] - (i64)p.query_start[lo], (i64)0);
    b.tok = p.query_start[lo];
  }
  b.qi0 = local * p.cta_tokens;
  b.tok += b.qi0;
  // Tokens past the packed queries (device metadata the host could not check) are not touched.
  b.ntok = max_of(min_of(min_of(p.cta_tokens, b.n_q - b.qi0), p.tokens - b.tok), (i64)0);
  return b;
}

// Tokens of no processed sequence get 0: zero-fill block z clears its kRaggedZeroTokens tokens
// outside [query_start[0], query_start[active]) for this block's heads.
template <class Cfg>
__device__ __forceinline__ void ragged_zero_fill(const RaggedPageParams& p, i64 z) {
  using St = typename PageShape<Cfg>::St;
  const i64 active = ragged_active_seqs(p);
  const i64 lo = active == 0 ? p.tokens : (i64)p.query_start[0];
  const i64 hi = active == 0 ? p.tokens : (i64)p.query_start[active];
  const RaggedBlock b = ragged_heads(p);
  const i64 t0 = z * kRaggedZeroTokens, items = kRaggedZeroTokens * b.nh * p.head_dim;
  for (i64 x = threadIdx.x; x < items; x += kRaggedThreads) {
    const i64 t = t0 + x / (b.nh * p.head_dim), h = b.h0 + (x / p.head_dim) % b.nh, d = x % p.head_dim;
    if (t >= p.tokens || (t >= lo && t < hi)) continue;
    static_cast<St*>(p.out)[t * p.o_st + h * p.o_sh + d] = St(0);
  }
}

// Tile [t0, t0 + n) of sequence s, kv head g, into stage st: cp.async where rows allow 16-byte
// chunks, else element loads; positions past n are zeros.
template <class Cfg>
__device__ __forceinline__ void ragged_load_tile(const RaggedPageParams& p, const RaggedSmem<Cfg>& sm, int st, i64 s,
                                                 i64 g, i64 t0, int n) {
  using S = PageShape<Cfg>;
  using St = typename S::St;
  for (int x = threadIdx.x; x < kRaggedTile * S::kChunks; x += kRaggedThreads) {
    const int i = x / S::kChunks, c = x % S::kChunks;
    uint4* dk = reinterpret_cast<uint4*>(sm.k(st) + i * S::kKRow + c * S::kChunkElems);
    uint4* dv = reinterpret_cast<uint4*>(sm.v(st) + i * S::kRow + c * S::kChunkElems);
    if (i >= n) {
      *dk = make_uint4(0, 0, 0, 0), *dv = make_uint4(0, 0, 0, 0);
      continue;
    }
    const i64 j = t0 + i, page = ragged_page_of(p, s, j), slot = j % p.page_size;
    const i64 ko = page * p.k_sp + slot * p.k_ss + g * p.k_sh, vo = page * p.v_sp + slot * p.v_ss + g * p.v_sh;
    if (p.vec != 0) {
      cp_async_16(smem_addr(dk), static_cast<const St*>(p.k) + ko + c * S::kChunkElems, true);
      cp_async_16(smem_addr(dv), static_cast<const St*>(p.v) + vo + c * S::kChunkElems, true);
    } else {
      page_copy_chunk<Cfg>(dk, p.k, ko, c, false);
      page_copy_chunk<Cfg>(dv, p.v, vo, c, false);
    }
  }
}

// Row r's scores of the tile (its two halves summed), masked to its span, biased and capped;
// then its online-softmax step: the weights replace the scores, m, l and alpha updated.
template <class Cfg>
__device__ __forceinline__ void ragged_softmax_rows(const RaggedPageParams& p, const RaggedSmem<Cfg>& sm,
                                                    const RaggedBlock& b, i64 ctx, i64 t0, int n, int rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool bias = p.alibi != nullptr || p.qq_bias != nullptr;
  for (int r = warp; r < rows; r += kRaggedThreads / 32) {
    const i64 h = b.h0 + r % b.nh;
    const RaggedSpan span{b.seq, sm.begin[r], sm.end[r], ctx, sm.qi[r]};
    float x[kRaggedTile / 32];
    float mt = sm.m[r];
#pragma unroll
    for (int k = 0; k < kRaggedTile / 32; ++k) {
      const int i = lane + 32 * k;
      const i64 j = t0 + i;
      float v = sm.score[r * kRaggedTile + i] + sm.score[(kRaggedRows + r) * kRaggedTile + i];
      if (bias) v += ragged_bias(p, span, h, j);
      if (p.softcap > 0.0f) v = p.softcap * tanhf(v / p.softcap);
      x[k] = i < n && j >= span.begin && j < span.end ? v : neg_inf_f32();
      mt = fmaxf(mt, x[k]);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    // A row may see none of this tile (its span is inside the block's): with nothing seen yet
    // mt is -inf, and exp against 0 keeps every weight and the rescale finite (0).
    const float base = mt == neg_inf_f32() ? 0.0f : mt;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kRaggedTile / 32; ++k) {
      const float e = expf(x[k] - base);
      sm.score[r * kRaggedTile + lane + 32 * k] = e;
      sum += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    __syncwarp();
    if (lane == 0) {
      const float alpha = expf(sm.m[r] - base);
      sm.alpha[r] = alpha, sm.l[r] = sm.l[r] * alpha + sum, sm.m[r] = mt;
    }
  }
}

// Scores of the tile in stage st: thread (position i, half) over its half of the chunks.
template <class Cfg>
__device__ __forceinline__ void ragged_scores(const RaggedSmem<Cfg>& sm, int st, int rows) {
  using S = PageShape<Cfg>;
  const int i = threadIdx.x % kRaggedTile, half = threadIdx.x / kRaggedTile;
  float dot[kRaggedRows];
#pragma unroll
  for (int r = 0; r < kRaggedRows; ++r) dot[r] = 0.0f;
  const int c0 = half == 0 ? 0 : S::kHalf, c1 = half == 0 ? S::kHalf : S::kChunks;
  for (int c = c0; c < c1; ++c) {
    float kx[S::kChunkElems];
    page_chunk_f32<Cfg>(*reinterpret_cast<const uint4*>(sm.k(st) + i * S::kKRow + c * S::kChunkElems), kx);
#pragma unroll
    for (int r = 0; r < kRaggedRows; ++r) {
      if (r >= rows) break;
      const float* qr = sm.q + r * S::kRow + c * S::kChunkElems;
#pragma unroll
      for (int e = 0; e < S::kChunkElems; ++e) dot[r] += qr[e] * kx[e];
    }
  }
#pragma unroll
  for (int r = 0; r < kRaggedRows; ++r)
    if (r < rows) sm.score[(half * kRaggedRows + r) * kRaggedTile + i] = dot[r];
}

template <class Cfg>
__device__ __forceinline__ void ragged_page_attention(const RaggedPageParams& p) {
  using S = PageShape<Cfg>;
  using St = typename S::St;
  static_assert(kRaggedThreads == 2 * kRaggedTile, "the score phase takes two threads per position");
  static_assert(kRaggedTile % 32 == 0 && kRaggedRows <= kRaggedThreads, "softmax and row setup by warps");
  static_assert(kRaggedRows == kPageMaxGroup && kRaggedThreads == kPageThreads, "PageShape's items are rows x chunks");
  if (i64(blockIdx.x) >= p.q_blocks) return ragged_zero_fill<Cfg>(p, i64(blockIdx.x) - p.q_blocks);
  const RaggedBlock b = ragged_block(p, blockIdx.x);
  if (b.ntok == 0) return;
  if constexpr (Cfg::E != Elem::f32 && Cfg::kD % 16 == 0 && Cfg::kD <= 256) {
    if (p.vec != 0 && b.ntok == 1)  // one token's rows: the tensor-core decode (page_uses_tc)
      return ragged_decode_tc<Cfg>(p, b.seq, b.n_q, b.qi0, b.tok, b.g, b.h0, int(b.nh));
  }
  extern __shared__ __align__(16) unsigned char smem[];
  const RaggedSmem<Cfg> sm(smem);
  const int tid = threadIdx.x, rows = int(b.ntok * b.nh);

  // The block's positions: the union of its rows' spans (the first token's begin, the last's end).
  const RaggedSpan first = ragged_span_of(p, b.seq, b.n_q, b.qi0);
  const RaggedSpan last = ragged_span_of(p, b.seq, b.n_q, b.qi0 + b.ntok - 1);
  const i64 begin = first.begin, end = max_of(last.end, begin), ctx = first.ctx;
  for (int x = tid; x < kRaggedRows * S::kRow; x += kRaggedThreads) {
    const int r = x / S::kRow, d = x % S::kRow;
    float v = 0.0f;
    if (r < rows && d < Cfg::kD)
      v = page_to_f32<Cfg::E>(static_cast<const St*>(p.q)[(b.tok + r / b.nh) * p.q_st + (b.h0 + r % b.nh) * p.q_sh + d]);
    sm.q[x] = v * p.scale;
  }
  if (tid < kRaggedRows) {
    const RaggedSpan sp = ragged_span_of(p, b.seq, b.n_q, b.qi0 + min_of(i64(tid / b.nh), b.ntok - 1));
    sm.m[tid] = neg_inf_f32(), sm.l[tid] = 0.0f, sm.alpha[tid] = 1.0f;
    sm.begin[tid] = int(sp.begin), sm.end[tid] = int(sp.end), sm.qi[tid] = int(sp.qi);
  }

  float acc[S::kItems][S::kChunkElems];
#pragma unroll
  for (int it = 0; it < S::kItems; ++it)
#pragma unroll
    for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] = 0.0f;

  if (begin < end) ragged_load_tile<Cfg>(p, sm, 0, b.seq, b.g, begin, int(min_of((i64)kRaggedTile, end - begin)));
  cp_async_commit();
  int st = 0;
  for (i64 t0 = begin; t0 < end; t0 += kRaggedTile, st ^= 1) {
    const int n = int(min_of((i64)kRaggedTile, end - t0));
    // The next tile streams in while this one is computed; its stage was freed by the barrier
    // that ended the previous iteration.
    const i64 next = t0 + kRaggedTile;
    if (next < end) ragged_load_tile<Cfg>(p, sm, st ^ 1, b.seq, b.g, next, int(min_of((i64)kRaggedTile, end - next)));
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // this tile's rows (and q, m, l, the spans on the first tile) are in place
    ragged_scores<Cfg>(sm, st, rows);
    __syncthreads();
    ragged_softmax_rows<Cfg>(p, sm, b, ctx, t0, n, rows);
    __syncthreads();
#pragma unroll
    for (int it = 0; it < S::kItems; ++it) {  // values: item (row, chunk)
      const int x = tid + it * kRaggedThreads, r = x / S::kChunks, c = x % S::kChunks;
      if (r >= rows) continue;
      const float alpha = sm.alpha[r];
#pragma unroll
      for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] *= alpha;
      for (int i = 0; i < n; ++i) {
        const float w = sm.score[r * kRaggedTile + i];
        float vx[S::kChunkElems];
        page_chunk_f32<Cfg>(*reinterpret_cast<const uint4*>(sm.v(st) + i * S::kRow + c * S::kChunkElems), vx);
#pragma unroll
        for (int e = 0; e < S::kChunkElems; ++e) acc[it][e] += w * vx[e];
      }
    }
    __syncthreads();  // this stage is free for the tile after next
  }
  cp_async_wait<0>();
  __syncthreads();  // m and l of the last tile (and the setup when there was no tile)
#pragma unroll
  for (int it = 0; it < S::kItems; ++it) {
    const int x = tid + it * kRaggedThreads, r = x / S::kChunks, c = x % S::kChunks;
    if (r >= rows) continue;
    const i64 t = b.tok + r / b.nh, h = b.h0 + r % b.nh;
    // The sink joins the denominator only, both rescaled to the larger of the running max and
    // the sink; nothing visible (l = 0) leaves 0.
    float inv = 0.0f;
    if (sm.l[r] > 0.0f) {
      float keep = 1.0f, l = sm.l[r];
      if (p.sinks != nullptr) {
        const float sink = p.sinks[h], mx = fmaxf(sink, sm.m[r]);
        keep = expf(sm.m[r] - mx), l = l * keep + expf(sink - mx);
      }
      inv = keep / l;
    }
    page_store_chunk<Cfg>(static_cast<St*>(p.out) + t * p.o_st + h * p.o_sh, acc[it], inv, c);
  }
  if (p.lse != nullptr && tid < rows) {
    const i64 t = b.tok + tid / b.nh, h = b.h0 + tid % b.nh;
    p.lse[t * p.lse_st + h * p.lse_sh] =
        ragged_row_lse(p, h, sm.m[tid], sm.l[tid], [](float x) { return logf(x); }, [](float x) { return expf(x); });
  }
}

}  // namespace ejk::cuda
