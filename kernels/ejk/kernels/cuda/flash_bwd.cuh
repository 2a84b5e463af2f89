// CUDA flash attention backward (the math: common/flash_bwd_params.h), the CPU kernel's task
// list on the GPU: block t runs task t of flash_bwd_tasks (dk/dv of a key block, dq and dbias of
// a query block of a bias plane, or one sink row's gradient). Every output element is written by
// one thread in a fixed order: no atomics, so two runs are bit-identical (deterministic).
//
// Scalar FMAs, one warp per block: thread j owns key j of its block (dk/dv tasks) or query j
// (dq tasks), with its accumulators in local memory; K/V tiles in shared memory as the element
// type. Only bias variants and head dims that are no multiple of 16 take this kernel; the rest
// run flash_bwd_tc.cuh's tensor-core launches (flash_bwd_tensor_cores), on sm90a with the
// wgmma kernels of flash_bwd_sm90.cuh where flash_bwd_uses_wgmma says so.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "ejk/kernels/cuda/flash_bwd_sm90.cuh"
#include "ejk/kernels/cuda/flash_bwd_tc.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

inline constexpr int kFlashBwdThreads = kFlashBwdBlock;  // one warp; block_q = block_k = 32

template <Elem E> __device__ __forceinline__ float bwd_read(const void* base, i64 at) {
  return to_f32<E>(static_cast<const u16*>(base)[at]);
}
template <Elem E> __device__ __forceinline__ void bwd_write(void* base, i64 at, float x) {
  static_cast<u16*>(base)[at] = u16(pack2<E>(x, 0.0f) & 0xffffu);
}

struct BwdSeq {
  i64 b, q_row0, k_row0, sq, sk;
  bool varlen;
};
__device__ __forceinline__ BwdSeq bwd_seq(const FlashFwdParams& f, i64 b) {
  if (f.cu_seqlens_q) {
    const TokenSpan tq = token_span(f.cu_seqlens_q, 0, f.total_q, b), tk = token_span(f.cu_seqlens_k, 0, f.total_k, b);
    return {b, tq.begin, tk.begin, tq.end - tq.begin, tk.end - tk.begin, true};
  }
  return {b, 0, 0, f.seqlen_q, f.seqlen_k, false};
}
__device__ __forceinline__ i64 bwd_at(const BwdSeq& s, i64 row0, i64 row, i64 h, i64 sb, i64 ss, i64 sh) {
  return (s.varlen ? 0 : s.b * sb) + (row0 + row) * ss + h * sh;
}
__device__ __forceinline__ i64 bwd_lse_at(const FlashFwdParams& f, const BwdSeq& s, i64 h, i64 i) {
  return (s.varlen ? 0 : s.b * f.lse_stride_b) + h * f.lse_stride_h + s.q_row0 + i;
}

// Gradient dX of the pre-cap logit of a visible-by-position pair (0 and false when its segments
// hide it); prob its probability. q, d_out: f32 rows; k, v: rows in the element type.
template <class Cfg>
__device__ __forceinline__ bool bwd_pair(const FlashBwdParams& p, const BwdSeq& s, i64 h, i64 i, i64 j,
                                         const float* q, const float* d_out, float delta, float lse, i32 q_seg,
                                         const u16* k, const u16* v, float& prob, float& dx) {
  constexpr AttentionFlags F = Cfg::kFlags;
  constexpr Elem E = Cfg::E;
  const FlashFwdParams& f = p.fwd;
  if (F.segments && !segment_visible(q_seg, f.kv_segment_ids[s.b * f.kv_seg_stride_b + j])) return false;
  float dot_qk = 0.0f, dot_dv = 0.0f;
#pragma unroll 8
  for (int d = 0; d < Cfg::kD; ++d) {
    dot_qk += q[d] * to_f32<E>(k[d]);
    dot_dv += d_out[d] * to_f32<E>(v[d]);
  }
  float x = f.scale * dot_qk;
  if constexpr (F.bias) x += bwd_read<E>(f.bias, s.b * f.bias_stride_b + h * f.bias_stride_h + i * f.bias_stride_q + j);
  if constexpr (F.softcap) x = f.softcap * tanhf(x / f.softcap);
  prob = __expf(prob_exponent(x, lse));
  if constexpr (F.dropout) {
    // The dropped weight feeds dv; dP is masked and scaled (flash_bwd_params.h).
    const float z = dropout_factor(flash_dropout(p), s.b, h, i, j);
    dx = prob * (z * dot_dv - delta);
    prob *= z;
  } else {
    dx = prob * (dot_dv - delta);
  }
  if constexpr (F.softcap) {
    const float t = x / f.softcap;
    dx *= 1.0f - t * t;
  }
  return true;
}

// Loads query i of head h into f32 rows (shared or local) and returns delta (d_out . out - dlse).
template <class Cfg>
__device__ __forceinline__ float bwd_load_query(const FlashBwdParams& p, const BwdSeq& s, i64 h, i64 i, float* q,
                                                float* d_out, int d0, int dstep) {
  constexpr Elem E = Cfg::E;
  const FlashFwdParams& f = p.fwd;
  float delta = 0.0f;
  for (int d = d0; d < Cfg::kD; d += dstep) {
    q[d] = bwd_read<E>(f.q, bwd_at(s, s.q_row0, i, h, f.q_stride_b, f.q_stride_s, f.q_stride_h) + d);
    d_out[d] = bwd_read<E>(p.d_out, bwd_at(s, s.q_row0, i, h, p.do_stride_b, p.do_stride_s, p.do_stride_h) + d);
    delta += d_out[d] * bwd_read<E>(f.out, bwd_at(s, s.q_row0, i, h, f.o_stride_b, f.o_stride_s, f.o_stride_h) + d);
  }
  return delta;
}

// Sum over the warp in a fixed order (a butterfly: every lane gets the same bits).
template <class T> __device__ __forceinline__ T bwd_warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <class Cfg> __device__ void bwd_kv_task(const FlashBwdParams& p, i64 b, i64 hk, i64 kb) {
  constexpr int D = Cfg::kD, BK = kFlashBwdThreads;
  constexpr AttentionFlags F = Cfg::kFlags;
  __shared__ float sq_row[D], sdo_row[D];
  __shared__ u16 sk[BK][D], sv[BK][D];
  const FlashFwdParams& f = p.fwd;
  const BwdSeq s = bwd_seq(f, b);
  const i64 k_first = kb * BK;
  if (k_first >= s.sk) return;
  const int nk = int(min_of<i64>(BK, s.sk - k_first)), lane = threadIdx.x;
  for (int r = 0; r < nk; ++r)
    for (int d = lane; d < D; d += BK) {
      sk[r][d] = static_cast<const u16*>(f.k)[bwd_at(s, s.k_row0, k_first + r, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h) + d];
      sv[r][d] = static_cast<const u16*>(f.v)[bwd_at(s, s.k_row0, k_first + r, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h) + d];
    }
  float dk[D], dv[D];
#pragma unroll
  for (int d = 0; d < D; ++d) dk[d] = dv[d] = 0.0f;
  const MaskSpec m = variant_mask<F>(f.mask);
  const PositionSpan qs = block_visible_queries<bounded_mask(F)>(m, k_first, k_first + nk - 1, s.sq);
  const i64 group = f.heads_q / f.heads_kv, j = k_first + lane;
  for (i64 h = hk * group; h < (hk + 1) * group; ++h)
    for (i64 i = qs.first; i <= qs.last; ++i) {
      const float lse = f.lse[bwd_lse_at(f, s, h, i)];
      if (lse == neg_inf_f32()) continue;  // uniform across the warp
      __syncwarp();
      float delta = bwd_warp_sum(bwd_load_query<Cfg>(p, s, h, i, sq_row, sdo_row, lane, BK));
      if (p.d_lse) delta -= p.d_lse[bwd_lse_at(f, s, h, i)];
      __syncwarp();
      const PositionSpan ks = block_visible_keys<bounded_mask(F)>(m, i, i, s.sk);
      const i32 q_seg = F.segments ? f.q_segment_ids[s.b * f.q_seg_stride_b + i] : 0;
      float prob, dx;
      if (lane < nk && j >= ks.first && j <= ks.last &&
          bwd_pair<Cfg>(p, s, h, i, j, sq_row, sdo_row, delta, lse, q_seg, sk[lane], sv[lane], prob, dx)) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
          dv[d] += prob * sdo_row[d];
          dk[d] += dx * f.scale * sq_row[d];
        }
      }
    }
  if (lane >= nk) return;
  const i64 ak = bwd_at(s, s.k_row0, j, hk, p.dk_stride_b, p.dk_stride_s, p.dk_stride_h);
  const i64 av = bwd_at(s, s.k_row0, j, hk, p.dv_stride_b, p.dv_stride_s, p.dv_stride_h);
  for (int d = 0; d < D; ++d) {
    bwd_write<Cfg::E>(p.dk, ak + d, dk[d]);
    bwd_write<Cfg::E>(p.dv, av + d, dv[d]);
  }
}

template <class Cfg> __device__ void bwd_q_task(const FlashBwdParams& p, i64 pb, i64 ph, i64 qb) {
  constexpr int D = Cfg::kD, BQ = kFlashBwdThreads, BK = kFlashBwdThreads;
  constexpr AttentionFlags F = Cfg::kFlags;
  __shared__ u16 sk[BK][D], sv[BK][D];
  const FlashFwdParams& f = p.fwd;
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const MaskSpec m = variant_mask<F>(f.mask);
  const i64 group = f.heads_q / f.heads_kv, q_first = qb * BQ;
  const int lane = threadIdx.x;
  const i64 i = q_first + lane;
  const bool with_dbias = F.bias && p.dbias;
  // This thread's dbias row: f32 sums in the workspace, converted once every pair is in.
  float* acc = with_dbias ? p.dbias_work + ((pb * pl.heads + ph) * f.seqlen_q + i) * f.seqlen_k : nullptr;
  if (with_dbias && i < f.seqlen_q)
    for (i64 j = 0; j < f.seqlen_k; ++j) acc[j] = 0.0f;
  float q[D], d_out[D], dq[D];
  for (i64 b = pb * pl.fold_b; b < (pb + 1) * pl.fold_b; ++b) {
    const BwdSeq s = bwd_seq(f, b);
    if (q_first >= s.sq) continue;
    const int nq = int(min_of<i64>(BQ, s.sq - q_first));
    const TileRange tiles = visible_key_tiles<bounded_mask(F)>(m, q_first, q_first + nq - 1, s.sk, BK);
    const PositionSpan ks = block_visible_keys<bounded_mask(F)>(m, i, i, s.sk);
    for (i64 h = ph * pl.fold_h; h < (ph + 1) * pl.fold_h; ++h) {
      const i64 hk = h / group;
      const bool live = lane < nq && f.lse[bwd_lse_at(f, s, h, min_of<i64>(i, s.sq - 1))] != neg_inf_f32();
      const float lse = live ? f.lse[bwd_lse_at(f, s, h, i)] : 0.0f;
      float delta = live ? bwd_load_query<Cfg>(p, s, h, i, q, d_out, 0, 1) : 0.0f;
      if (live && p.d_lse) delta -= p.d_lse[bwd_lse_at(f, s, h, i)];
      const i32 q_seg = F.segments && lane < nq ? f.q_segment_ids[s.b * f.q_seg_stride_b + i] : 0;
#pragma unroll
      for (int d = 0; d < D; ++d) dq[d] = 0.0f;
      for (int tile = tiles.begin; tile < tiles.end; ++tile) {
        const i64 k_first = i64(tile) * BK;
        const int nk = int(min_of<i64>(BK, s.sk - k_first));
        __syncwarp();
        for (int r = 0; r < nk; ++r)
          for (int d = lane; d < D; d += BK) {
            sk[r][d] = static_cast<const u16*>(f.k)[bwd_at(s, s.k_row0, k_first + r, hk, f.k_stride_b, f.k_stride_s, f.k_stride_h) + d];
            sv[r][d] = static_cast<const u16*>(f.v)[bwd_at(s, s.k_row0, k_first + r, hk, f.v_stride_b, f.v_stride_s, f.v_stride_h) + d];
          }
        __syncwarp();
        if (!live) continue;
        const int j0 = int(max_of<i64>(ks.first - k_first, 0)), j1 = int(min_of<i64>(ks.last - k_first, nk - 1));
        for (int jj = j0; jj <= j1; ++jj) {
          float prob, dx;
          if (!bwd_pair<Cfg>(p, s, h, i, k_first + jj, q, d_out, delta, lse, q_seg, sk[jj], sv[jj], prob, dx)) continue;
#pragma unroll
          for (int d = 0; d < D; ++d) dq[d] += dx * f.scale * to_f32<Cfg::E>(sk[jj][d]);
          if (with_dbias) acc[k_first + jj] += dx;
        }
      }
      if (lane < nq) {
        const i64 at = bwd_at(s, s.q_row0, i, h, p.dq_stride_b, p.dq_stride_s, p.dq_stride_h);
        for (int d = 0; d < D; ++d) bwd_write<Cfg::E>(p.dq, at + d, dq[d]);
      }
    }
  }
  if (with_dbias && i < f.seqlen_q)
    for (i64 j = 0; j < f.seqlen_k; ++j)
      bwd_write<Cfg::E>(p.dbias, pb * p.dbias_stride_b + ph * p.dbias_stride_h + i * p.dbias_stride_q + j, acc[j]);
}

// dsoftmax_aux of sink row hs: lanes take rows in turn, summed in double, then across the warp.
template <class Cfg> __device__ void bwd_sink_task(const FlashBwdParams& p, i64 hs) {
  constexpr int kChunk = 8;
  const FlashFwdParams& f = p.fwd;
  const bool shared = f.sinks_stride_h == 0;
  const float* sinks = f.softmax_aux + hs * f.sinks_stride_h;
  const int lane = threadIdx.x;
  float q[Cfg::kD], d_out[Cfg::kD];
  for (i64 t0 = 0; t0 < f.num_sinks; t0 += kChunk) {
    const int nt = int(min_of<i64>(kChunk, f.num_sinks - t0));
    double acc[kChunk] = {};
    for (i64 h = shared ? 0 : hs; h < (shared ? f.heads_q : hs + 1); ++h)
      for (i64 b = 0; b < f.batch; ++b) {
        const BwdSeq s = bwd_seq(f, b);
        for (i64 i = lane; i < s.sq; i += kFlashBwdThreads) {
          const float lse = f.lse[bwd_lse_at(f, s, h, i)];
          if (lse == neg_inf_f32()) continue;
          float delta = bwd_load_query<Cfg>(p, s, h, i, q, d_out, 0, 1);
          if (p.d_lse) delta -= p.d_lse[bwd_lse_at(f, s, h, i)];
          for (int t = 0; t < nt; ++t) acc[t] -= double(__expf(sinks[t0 + t] - lse)) * double(delta);
        }
      }
    for (int t = 0; t < nt; ++t) {
      const double sum = bwd_warp_sum(acc[t]);
      if (lane == 0) p.dsoftmax_aux[hs * f.num_sinks + t0 + t] = float(sum);
    }
  }
}

template <class Cfg> __device__ void flash_bwd_scalar(const FlashBwdParams& p) {
  const FlashFwdParams& f = p.fwd;
  const FlashBwdTasks n = flash_bwd_tasks(p, kFlashBwdThreads, kFlashBwdThreads);
  const FlashBwdPlanes pl = flash_bwd_planes(p);
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, kFlashBwdThreads), qblocks = ceil_div<i64>(f.seqlen_q, kFlashBwdThreads);
  const i64 t = blockIdx.x;
  if (t < n.kv) {
    bwd_kv_task<Cfg>(p, t / (f.heads_kv * kblocks), t / kblocks % f.heads_kv, t % kblocks);
  } else if (t < n.kv + n.q) {
    const i64 u = t - n.kv;
    bwd_q_task<Cfg>(p, u / (pl.heads * qblocks), u / qblocks % pl.heads, u % qblocks);
  } else if constexpr (Cfg::kFlags.sinks) {
    bwd_sink_task<Cfg>(p, t - n.kv - n.q);
  }
}

// Cfg: kArch, E (bf16 or f16), kD, kBlockQ, kBlockK, kFlags. p.phase picks the launch (the scalar
// kernel's one, or one of the tensor-core path's four).
template <class Cfg> __device__ void flash_bwd(const FlashBwdParams& p) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && (p.phase == kBwdScalar || p.phase == kBwdDelta)) {
    // 0-d placeholders of absent inputs' gradients read as 0
    if (p.zero_dbias) *static_cast<u16*>(p.zero_dbias) = 0;
    if (p.zero_dsoftmax_aux) *p.zero_dsoftmax_aux = 0.0f;
  }
  if constexpr (!flash_bwd_tensor_cores(Cfg::kFlags.bias, Cfg::kD)) {
    flash_bwd_scalar<Cfg>(p);
  } else if (p.phase == kBwdDelta) {
    bwd_delta_rows<Cfg>(p);
  } else if (p.phase == kBwdKv) {
    if constexpr (flash_bwd_uses_wgmma<Cfg>()) bwd_kv_sm90<Cfg>(p);
    else bwd_kv_tc<Cfg>(p);
  } else if (p.phase == kBwdQ) {
    if constexpr (flash_bwd_uses_wgmma<Cfg>()) bwd_q_sm90<Cfg>(p);
    else bwd_q_tc<Cfg>(p);
  } else if constexpr (Cfg::kFlags.sinks) {
    bwd_sink_task<Cfg>(p, blockIdx.x);
  }
}

}  // namespace ejk::cuda
