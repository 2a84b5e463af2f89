// The CUDA merge of two attention states (the rule: common/merge_states_params.h).
// A group of p.lanes_per_row lanes (a power of two <= 32, inside one warp) takes a row at a
// time; its lanes read interleaved chunks of p.vec_elems elements, kMergeChunksPerLane of each
// input in flight per lane: 16-byte loads and stores where the runtime found every out tensor's
// base and strides 16-byte aligned, else one element per lane (still coalesced). The groups of
// the grid walk the rows with a stride, so a grid of one wave covers any problem. Rows are
// numbered ((lead * H) + h) * T + t, t fastest: the groups of a warp read neighbouring LSEs,
// and each group reads its out rows whole wherever they lie.
#pragma once
#include "ejk/kernels/common/merge_states_params.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// The hardware's approximations: exp's argument is <= 0, where ex2.approx's error scales the
// weight it is relative to, and the sum is in [1, 2]. The IEEE forms are calls with slow paths
// that cost registers in every iteration.
struct MergeMath {
  static constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  __device__ __forceinline__ float exp(float x) const { return fast_exp2(x * kLog2e); }
  __device__ __forceinline__ float log(float x) const { return fast_log2(x) * kLn2; }
  __device__ __forceinline__ float rcp(float x) const { return fast_rcp(x); }
};

template <Elem E> struct MergeStorage { using type = u16; };
template <> struct MergeStorage<Elem::f32> { using type = float; };

// kN elements as they sit in memory: 16 bytes (a uint4), or one element.
template <Elem E, int kN> struct MergeChunkOf { using type = uint4; };
template <Elem E> struct MergeChunkOf<E, 1> { using type = typename MergeStorage<E>::type; };
template <Elem E, int kN> using MergeChunk = typename MergeChunkOf<E, kN>::type;

template <Elem E, int kN>
__device__ __forceinline__ void merge_unpack(const MergeChunk<E, kN>& c, float (&x)[kN]) {
  if constexpr (kN == 1) {
    if constexpr (E == Elem::f32) x[0] = c;
    else x[0] = to_f32<E>(c);
  } else {
    const u32 w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (E == Elem::f32) {
        x[i] = __uint_as_float(w[i]);
      } else {
        x[2 * i] = to_f32<E>(static_cast<u16>(w[i] & 0xffffu));
        x[2 * i + 1] = to_f32<E>(static_cast<u16>(w[i] >> 16));
      }
    }
  }
}

// kN floats in E, rounded to nearest even.
template <Elem E, int kN>
__device__ __forceinline__ MergeChunk<E, kN> merge_pack(const float (&x)[kN]) {
  if constexpr (kN == 1) {
    if constexpr (E == Elem::f32) return x[0];
    else return static_cast<u16>(pack2<E>(x[0], 0.0f) & 0xffffu);
  } else {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (E == Elem::f32) w[i] = __float_as_uint(x[i]);
      else w[i] = pack2<E>(x[2 * i], x[2 * i + 1]);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <Elem E, int kN>
__device__ __forceinline__ void merge_rows(const MergeStatesParams& p) {
  using S = typename MergeStorage<E>::type;
  using C = MergeChunk<E, kN>;
  static_assert(kN == 1 || kN * sizeof(S) == 16, "merge_states: a chunk is one element or 16 bytes");
  constexpr int kU = kMergeChunksPerLane;
  const int lanes = p.lanes_per_row;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1);
  // The group's lanes of the warp: shuffles within the group only (width `lanes`).
  const u32 group = (lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u) << ((threadIdx.x & 31u) & ~u32(lanes - 1));
  const u32 groups_per_block = kMergeStatesThreads / lanes, stride = gridDim.x * groups_per_block;
  const u32 rows = static_cast<u32>(p.rows), tokens = static_cast<u32>(p.tokens), heads = static_cast<u32>(p.heads);
  const i64 chunks = p.head_dim / kN;
  // 32-bit row numbers: the runtime launches fewer than 2^31 rows, so row + stride fits.
  for (u32 row = blockIdx.x * groups_per_block + threadIdx.x / lanes; row < rows; row += stride) {
    const u32 plane = row / tokens, lead = plane / heads;
    const i64 t = row - plane * tokens, h = plane - lead * heads;
    const MergeOffsets o = merge_lead_offsets(p, lead);
    // The row's chunks (kN elements each) in the three outs; 16-byte aligned when kN > 1.
    const C* a = reinterpret_cast<const C*>(static_cast<const S*>(p.out_a) + o.out[0] + t * p.out_stride_t[0] +
                                            h * p.out_stride_h[0]);  // (D / kN)
    const C* b = reinterpret_cast<const C*>(static_cast<const S*>(p.out_b) + o.out[1] + t * p.out_stride_t[1] +
                                            h * p.out_stride_h[1]);  // (D / kN)
    C* out = reinterpret_cast<C*>(static_cast<S*>(p.out) + o.out[2] + t * p.out_stride_t[2] +
                                  h * p.out_stride_h[2]);  // (D / kN)
    // Each lane keeps kU chunks of a and b in flight (c, c + lanes, ...), loaded raw; the first
    // ones before the weights are known, so their latency overlaps the LSEs' loads and exp/log.
    C ra[kU], rb[kU];
    auto load = [&](i64 c0) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (c0 + u * lanes < chunks) ra[u] = a[c0 + u * lanes], rb[u] = b[c0 + u * lanes];
    };
    i64 c0 = lane;
    load(c0);
    // Lane 0 alone reads and writes the row's LSEs, so lse may be lse_a or lse_b itself.
    float la = 0.0f, lb = 0.0f;
    if (lane == 0) la = p.lse_a[o.lse[0] + h * p.lse_stride_h[0] + t], lb = p.lse_b[o.lse[1] + h * p.lse_stride_h[1] + t];
    la = __shfl_sync(group, la, 0, lanes);
    lb = __shfl_sync(group, lb, 0, lanes);
    const MergeWeights<float> w = merge_weights(la, lb, MergeMath{});
    if (lane == 0) p.lse[o.lse[2] + h * p.lse_stride_h[2] + t] = w.lse;
    while (c0 < chunks) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (c0 + u * lanes >= chunks) break;
        float xa[kN], xb[kN], y[kN];
        merge_unpack<E, kN>(ra[u], xa);
        merge_unpack<E, kN>(rb[u], xb);
#pragma unroll
        for (int j = 0; j < kN; ++j) y[j] = merge_value(w, xa[j], xb[j]);
        out[c0 + u * lanes] = merge_pack<E, kN>(y);
      }
      c0 += kU * lanes;
      load(c0);
    }
  }
}

template <Elem E>
__device__ __forceinline__ void merge_states(const MergeStatesParams& p) {
  if (p.vec_elems == 1) merge_rows<E, 1>(p);
  else merge_rows<E, 16 / static_cast<int>(sizeof(typename MergeStorage<E>::type))>(p);
}

}  // namespace ejk::cuda
