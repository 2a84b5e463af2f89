// CUDA mean pooling, forward and backward (semantics: common/mean_pooling_params.h).
//
// A block of kMeanPoolThreads threads takes one (column tile, chunk): blockIdx.x the tile,
// blockIdx.y the chunk, so blocks launched together cover whole token rows of neighbouring
// chunks and memory is streamed roughly in order. Its threads form row groups of p.lanes
// threads; a row group covers the tile's columns (p.vec elements per thread: 16-byte accesses,
// or one element where alignment does not allow them) and walks its own slice of the chunk's
// tokens, so consecutive lanes read consecutive bytes of a token row.
//
// Forward, phase 0: a row group sums each of its pieces; a sequence whole in its slice goes to
// out at once, the others leave per-slice partial sums in shared memory, which row group 0 then
// adds in token order: whole in the chunk -> out, cut by the chunk's edges -> p.partials.
// Phase 1 (only when a sequence may cross a chunk edge): the block of the chunk where such a
// sequence ends adds its partial sums in chunk order and writes its mean. No atomics: the
// result does not depend on scheduling.
// Backward: each row group scales g's columns of a sequence once and stores them to each token.
#pragma once
#include "ejk/kernels/common/mean_pooling_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

constexpr i64 kMeanPoolBlock = 64;  // tokens summed apart before joining the running sum

// Storage of one element, and a thread's access of kV elements (one uint4, or one element).
template <Elem E> struct MeanPoolElem {
  using type = u16;
};
template <> struct MeanPoolElem<Elem::f32> {
  using type = float;
};
template <Elem E> constexpr int kMeanPoolWide = 16 / int(sizeof(typename MeanPoolElem<E>::type));

template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_add(float (&acc)[kV], const typename MeanPoolElem<E>::type* p) {
  if constexpr (kV == 1) {
    if constexpr (E == Elem::f32) acc[0] += __ldg(p);
    else acc[0] += to_f32<E>(__ldg(p));
  } else {
    static_assert(kV == kMeanPoolWide<E>, "a vector access is 16 bytes");
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (E == Elem::f32) {
        acc[i] += __uint_as_float(w[i]);
      } else {
        acc[2 * i] += to_f32<E>(u16(w[i] & 0xffffu));
        acc[2 * i + 1] += to_f32<E>(u16(w[i] >> 16));
      }
    }
  }
}

// kV f32 values in the element type, as the bits one store writes.
template <Elem E, int kV> struct MeanPoolPacked {
  uint4 v;
};
template <Elem E> struct MeanPoolPacked<E, 1> {
  typename MeanPoolElem<E>::type v;
};

template <Elem E, int kV>
__device__ __forceinline__ MeanPoolPacked<E, kV> mean_pool_pack(const float (&f)[kV], float scale) {
  MeanPoolPacked<E, kV> out;
  if constexpr (kV == 1) {
    if constexpr (E == Elem::f32) out.v = f[0] * scale;
    else out.v = u16(pack2<E>(f[0] * scale, 0.f) & 0xffffu);
  } else {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (E == Elem::f32) w[i] = __float_as_uint(f[i] * scale);
      else w[i] = pack2<E>(f[2 * i] * scale, f[2 * i + 1] * scale);
    }
    out.v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return out;
}

template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_store(typename MeanPoolElem<E>::type* p, const MeanPoolPacked<E, kV>& v) {
  if constexpr (kV == 1) *p = v.v;
  else *reinterpret_cast<uint4*>(p) = v.v;
}

// kV floats at p (16-byte aligned when kV is a multiple of 4).
template <int kV> __device__ __forceinline__ void mean_pool_put(float* p, const float (&f)[kV]) {
  if constexpr (kV % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kV; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(f[i], f[i + 1], f[i + 2], f[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < kV; ++i) p[i] = f[i];
  }
}
template <int kV> __device__ __forceinline__ void mean_pool_accumulate(float (&acc)[kV], const float* p) {
  if constexpr (kV % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kV; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      acc[i] += v.x, acc[i + 1] += v.y, acc[i + 2] += v.z, acc[i + 3] += v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kV; ++i) acc[i] += p[i];
  }
}

// Sum of n tokens (stride elements apart) from x into acc: four loads in flight per step, and
// blocks of kMeanPoolBlock tokens summed apart so long pieces round like short ones.
template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_sum(const typename MeanPoolElem<E>::type* x, i64 stride, i64 n,
                                              float (&acc)[kV]) {
  for (i64 t0 = 0; t0 < n; t0 += kMeanPoolBlock) {
    float part[kV] = {};
    const int m = int(min_of(n - t0, kMeanPoolBlock));
    const typename MeanPoolElem<E>::type* row = x + t0 * stride;
    int t = 0;
    for (; t + 4 <= m; t += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) mean_pool_add<E, kV>(part, row + (t + u) * stride);
    }
    for (; t < m; ++t) mean_pool_add<E, kV>(part, row + t * stride);
#pragma unroll
    for (int i = 0; i < kV; ++i) acc[i] += part[i];
  }
}

// Where a thread works: its row group's slice of the chunk's tokens and its columns.
struct MeanPoolThread {
  int lanes, groups, lane, group;
  i64 c;                 // its block's chunk
  i64 col;               // first of its columns
  bool active;           // its columns exist (the last tile may be narrower than the block)
  MeanPoolSpan chunk;    // the block's tokens
  i64 lo, hi;            // its row group's slice
  bool last;             // the last slice of the last chunk: also owns empty sequences at `total`
};

template <int kV> __device__ __forceinline__ MeanPoolThread mean_pool_thread(const MeanPoolParams& p) {
  MeanPoolThread w;
  w.lanes = p.lanes, w.groups = kMeanPoolThreads / p.lanes;
  w.lane = int(threadIdx.x) % w.lanes, w.group = int(threadIdx.x) / w.lanes;
  w.c = blockIdx.y;
  w.col = i64(blockIdx.x) * p.col_tile + i64(w.lane) * kV;
  w.active = w.col < p.dim;
  w.chunk = mean_pool_chunk(p, w.c);
  const i64 size = w.chunk.end - w.chunk.begin;
  w.lo = w.chunk.begin + size * w.group / w.groups;
  w.hi = w.chunk.begin + size * (w.group + 1) / w.groups;
  w.last = w.c == p.chunks - 1 && w.group == w.groups - 1;
  return w;
}

template <Elem E> __device__ __forceinline__ typename MeanPoolElem<E>::type* mean_pool_rows(const MeanPoolParams& p) {
  return static_cast<typename MeanPoolElem<E>::type*>(p.rows);
}
template <Elem E> __device__ __forceinline__ typename MeanPoolElem<E>::type* mean_pool_tokens(const MeanPoolParams& p) {
  return static_cast<typename MeanPoolElem<E>::type*>(p.tokens);
}

// Shared memory of the forward's phase 0: per row group, the partial sums of its slice's first
// and last pieces ([groups][2][lanes * kV] floats) and whose they are (-1: none).
template <int kV> struct MeanPoolShared {
  float slots[2 * kMeanPoolThreads * kV];
  i64 heads[kMeanPoolThreads], tails[kMeanPoolThreads];
};

// A block's sum of sequence s: its mean when the sequence lies in the chunk, else a partial sum.
template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_emit(const MeanPoolParams& p, const MeanPoolThread& w, i64 s,
                                               const float (&acc)[kV]) {
  const MeanPoolSpan sp = mean_pool_span(p, s);
  if (sp.begin >= w.chunk.begin && sp.end <= w.chunk.end) {
    mean_pool_store<E, kV>(mean_pool_rows<E>(p) + s * p.row_stride + w.col,
                           mean_pool_pack<E, kV>(acc, mean_pool_scale<float>(sp.end - sp.begin)));
  } else {
    mean_pool_put<kV>(mean_pool_partial(p, w.c, sp.begin < w.chunk.begin ? 0 : 1) + w.col, acc);
  }
}

template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_fwd_sums(const MeanPoolParams& p, MeanPoolShared<kV>& sh) {
  const MeanPoolThread w = mean_pool_thread<kV>(p);
  const int width = w.lanes * kV;
  float* slots = sh.slots + 2 * w.group * width + w.lane * kV;  // its columns of its group's two slots
  if (w.lane == 0) sh.heads[w.group] = sh.tails[w.group] = -1;
  mean_pool_walk(p, w.lo, w.hi, w.last, [&](i64 s, const MeanPoolSpan& sp, i64 a, i64 e) {
    float acc[kV] = {};
    if (w.active)
      mean_pool_sum<E, kV>(mean_pool_tokens<E>(p) + mean_pool_token(p, s, a) + w.col, p.tok_stride_t, e - a, acc);
    if (sp.begin >= w.lo && sp.end <= w.hi) {  // whole in the slice (or empty): its mean now
      if (w.active)
        mean_pool_store<E, kV>(mean_pool_rows<E>(p) + s * p.row_stride + w.col,
                               mean_pool_pack<E, kV>(acc, mean_pool_scale<float>(sp.end - sp.begin)));
      return;
    }
    const int slot = sp.begin < w.lo ? 0 : 1;
#pragma unroll
    for (int i = 0; i < kV; ++i) slots[slot * width + i] = acc[i];
    if (w.lane == 0) (slot == 0 ? sh.heads : sh.tails)[w.group] = s;
  });
  __syncthreads();
  if (w.group != 0 || !w.active) return;
  // Row group 0 adds the slices' pieces in token order. A slice's first piece continues the
  // sequence still open (or the one that began before the chunk); its last piece opens one.
  float acc[kV] = {};
  i64 open = -1;
  for (int g = 0; g < w.groups; ++g) {
    const float* slot = sh.slots + 2 * g * width + w.lane * kV;
    if (sh.heads[g] >= 0) {
      open = sh.heads[g];
#pragma unroll
      for (int i = 0; i < kV; ++i) acc[i] += slot[i];
      const i64 slice_end = w.chunk.begin + (w.chunk.end - w.chunk.begin) * (g + 1) / w.groups;
      if (mean_pool_span(p, open).end <= slice_end) {
        mean_pool_emit<E, kV>(p, w, open, acc);
        open = -1;
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[i] = 0;
      }
    }
    if (sh.tails[g] >= 0) {
      open = sh.tails[g];
#pragma unroll
      for (int i = 0; i < kV; ++i) acc[i] = slot[width + i];
    }
  }
  if (open >= 0) mean_pool_emit<E, kV>(p, w, open, acc);
}

// Phase 1: the block of the chunk where a cut sequence ends adds the sequence's partial sums
// (row groups take every groups-th one, then row group 0 adds theirs in order).
template <Elem E, int kV>
__device__ __forceinline__ void mean_pool_fwd_combine(const MeanPoolParams& p, MeanPoolShared<kV>& sh) {
  const MeanPoolThread w = mean_pool_thread<kV>(p);
  const i64 s = mean_pool_first_sequence(p, w.chunk.begin);
  if (s >= p.sequences) return;
  const MeanPoolSpan sp = mean_pool_span(p, s);
  if (!(sp.begin < w.chunk.begin && sp.end > w.chunk.begin && sp.end <= w.chunk.end)) return;  // block-uniform
  const i64 first = mean_pool_first_chunk(p, sp), pieces = w.c - first + 1;
  const int width = w.lanes * kV;
  float acc[kV] = {};
  if (w.active) {
    // 64 bytes of pieces in flight per thread: one sequence may have thousands of pieces.
    constexpr int kUnroll = kV >= 8 ? 2 : 4;
    i64 k = w.group;
    for (; k + (kUnroll - 1) * w.groups < pieces; k += kUnroll * w.groups) {
      float part[kUnroll][kV] = {};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        mean_pool_accumulate<kV>(part[u], mean_pool_piece(p, first, k + u * w.groups) + w.col);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[i] += part[u][i];
    }
    for (; k < pieces; k += w.groups) mean_pool_accumulate<kV>(acc, mean_pool_piece(p, first, k) + w.col);
  }
  float* mine = sh.slots + w.group * width + w.lane * kV;
#pragma unroll
  for (int i = 0; i < kV; ++i) mine[i] = acc[i];
  __syncthreads();
  if (w.group != 0 || !w.active) return;
  for (int g = 1; g < w.groups; ++g) {
#pragma unroll
    for (int i = 0; i < kV; ++i) acc[i] += sh.slots[g * width + w.lane * kV + i];
  }
  mean_pool_store<E, kV>(mean_pool_rows<E>(p) + s * p.row_stride + w.col,
                         mean_pool_pack<E, kV>(acc, mean_pool_scale<float>(sp.end - sp.begin)));
}

template <Elem E, int kV> __device__ __forceinline__ void mean_pool_bwd_tokens(const MeanPoolParams& p) {
  const MeanPoolThread w = mean_pool_thread<kV>(p);
  if (!w.active) return;
  mean_pool_walk(p, w.lo, w.hi, w.last, [&](i64 s, const MeanPoolSpan& sp, i64 a, i64 e) {
    if (a == e) return;
    float g[kV] = {};
    mean_pool_add<E, kV>(g, mean_pool_rows<E>(p) + s * p.row_stride + w.col);
    const MeanPoolPacked<E, kV> v = mean_pool_pack<E, kV>(g, mean_pool_scale<float>(sp.end - sp.begin));
    typename MeanPoolElem<E>::type* dx = mean_pool_tokens<E>(p) + mean_pool_token(p, s, a) + w.col;
    const i64 n = e - a;
    i64 t = 0;
    for (; t + 4 <= n; t += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) mean_pool_store<E, kV>(dx + (t + u) * p.tok_stride_t, v);
    }
    for (; t < n; ++t) mean_pool_store<E, kV>(dx + t * p.tok_stride_t, v);
  });
}

// Entry points: the access width the runtime chose (p.vec), then the phase.
template <Elem E> __device__ __forceinline__ void mean_pool_fwd(const MeanPoolParams& p) {
  constexpr int kWide = kMeanPoolWide<E>;
  // One buffer for both widths (shared variables of each instantiation would all be allocated).
  __shared__ alignas(16) unsigned char smem[sizeof(MeanPoolShared<kWide>)];
  if (p.vec == kWide) {
    auto& sh = *reinterpret_cast<MeanPoolShared<kWide>*>(smem);
    if (p.phase == 0) mean_pool_fwd_sums<E, kWide>(p, sh);
    else mean_pool_fwd_combine<E, kWide>(p, sh);
  } else {
    auto& sh = *reinterpret_cast<MeanPoolShared<1>*>(smem);
    if (p.phase == 0) mean_pool_fwd_sums<E, 1>(p, sh);
    else mean_pool_fwd_combine<E, 1>(p, sh);
  }
}

template <Elem E> __device__ __forceinline__ void mean_pool_bwd(const MeanPoolParams& p) {
  if (p.vec == kMeanPoolWide<E>) mean_pool_bwd_tokens<E, kMeanPoolWide<E>>(p);
  else mean_pool_bwd_tokens<E, 1>(p);
}

}  // namespace ejk::cuda
