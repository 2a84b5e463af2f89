// CUDA backward of NSA's selection attention (the math: common/nsa_params.h) on mma.sync
// m16n8k16 tensor cores, f32 accumulation, two launches of one kernel (NsaBwdCudaParams::phase):
//
// - dq: one warp per (sequence, token, kv head, up to 16 query heads), the forward's task. The
//   heads are the 16 rows of Q and dO (A fragments in registers); each selected block, deduplicated
//   as the forward attends it, is walked in tiles of 64 keys: S = Q K^T and dP = dO V^T, P from
//   the saved lse, dS = scale P (dP - delta), dq += dS K with dS in registers as the A operand.
//   The warp also writes its rows' delta = d_out . out - d_lse for the second launch.
// - dk/dv: four warps per (sequence, kv head, tile of 64 keys of one block), a warp per 16 keys,
//   as the CPU's task: the block scans every token from the tile's first key on, 128 at a time
//   (each thread tests one token's slots), and compacts the tokens that selected the block in
//   increasing order with a ballot and per-warp counts; their (token, query head) rows are
//   batched 16 at a time as the mma's k dimension: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
//   dK += dS^T Q. Each output has one writer and a fixed order of sums: no atomics.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/nsa_params.h"
#include "ejk/kernels/cuda/nsa_fwd.cuh"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {
namespace nsa_bwd_detail {

// Elements c, c + 1 of a row (an A fragment's pair, or a B pair where k runs along the row).
__device__ __forceinline__ u32 row_pair(const u16* row, int c) { return u32(row[c]) | (u32(row[c + 1]) << 16); }

// Column c of rows r and r + 1 (a B pair where k runs over the rows).
template <int D> __device__ __forceinline__ u32 col_pair(const u16 (*rows)[D], int r, int c) {
  return u32(rows[r][c]) | (u32(rows[r + 1][c]) << 16);
}

// A fragments of rows [r0, r0 + 16) of a [.][D] tile: [kk][4] over the head dim.
template <int D> __device__ __forceinline__ void load_a(const u16 (*rows)[D], int r0, int g, int q2, u32 (*a)[4]) {
  for (int kk = 0; kk < D / 16; ++kk) {
    a[kk][0] = row_pair(rows[r0 + g], kk * 16 + q2), a[kk][1] = row_pair(rows[r0 + g + 8], kk * 16 + q2);
    a[kk][2] = row_pair(rows[r0 + g], kk * 16 + 8 + q2), a[kk][3] = row_pair(rows[r0 + g + 8], kk * 16 + 8 + q2);
  }
}

// acc (16 x 8) += A (16 x D, fragments) times rows [n0, n0 + 8) of a [.][D] tile transposed.
template <Elem E, int D>
__device__ __forceinline__ void times_rows_t(float (&acc)[4], const u32 (*a)[4], const u16 (*rows)[D], int n0, int g,
                                             int q2) {
  for (int kk = 0; kk < D / 16; ++kk)
    mma_16816<E>(acc, a[kk], row_pair(rows[n0 + g], kk * 16 + q2), row_pair(rows[n0 + g], kk * 16 + 8 + q2));
}

// out[dt] (16 x D) += A (16 x 16 as the accumulator layout of two n-tiles) times rows [0, 16) of
// a [.][D] tile starting at row r0.
template <Elem E, int D>
__device__ __forceinline__ void acc_times_rows(float (*out)[4], const float (&lo)[4], const float (&hi)[4],
                                               const u16 (*rows)[D], int r0, int g, int q2) {
  const u32 a[4] = {pack2<E>(lo[0], lo[1]), pack2<E>(lo[2], lo[3]), pack2<E>(hi[0], hi[1]), pack2<E>(hi[2], hi[3])};
  for (int dt = 0; dt < D / 8; ++dt) {
    const int col = dt * 8 + g;
    mma_16816<E>(out[dt], a, col_pair<D>(rows, r0 + q2, col), col_pair<D>(rows, r0 + q2 + 8, col));
  }
}

// Rows g and g + 8 of a 16 x D accumulator to 16-bit rows at dst(r), for r < rows.
template <Elem E, int D, class Dst>
__device__ __forceinline__ void store_rows(const float (*acc)[4], int rows, int g, int q2, Dst&& dst) {
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (r >= rows) continue;
    u16* row = dst(r);
    for (int dt = 0; dt < D / 8; ++dt) {
      const u32 two = pack2<E>(acc[dt][2 * h], acc[dt][2 * h + 1]);
      row[dt * 8 + q2] = u16(two & 0xffffu), row[dt * 8 + q2 + 1] = u16(two >> 16);
    }
  }
}

// Each phase is a function of its own (not inlined): inlined into one kernel, the two are
// register-allocated together and spill (ptxas -v); a call per block costs nothing.
template <Elem E, int D> __device__ __attribute__((noinline)) void dq(const NsaParams& p, float* delta_ws) {
  constexpr int BK = int(kNsaKeyTile), KS = D / 16, DT = D / 8;
  extern __shared__ __align__(16) unsigned char nsa_bwd_smem[];
  u16(*qs)[D] = reinterpret_cast<u16(*)[D]>(nsa_bwd_smem);
  u16(*dos)[D] = qs + 16;
  u16(*ks)[D] = dos + 16;
  u16(*vs)[D] = ks + BK;
  const int lane = int(threadIdx.x) % 32, g = lane / 4, q2 = (lane % 4) * 2;

  // The task: sequence b, token t, kv head hk, query heads [h0, h0 + rows).
  const NsaRowTask task = nsa_row_task(p, i64(blockIdx.x));
  const i64 b = task.b, t = task.t, hk = task.hk, h0 = task.h0;
  const int rows = task.rows;

  const u16* q = static_cast<const u16*>(p.q);
  const u16* d_out = static_cast<const u16*>(p.d_out);
  const u16* out = static_cast<const u16*>(p.out);
  for (int i = lane; i < 16 * D; i += 32) {
    const int r = i / D, c = i % D;
    const bool in = r < rows;
    qs[r][c] = in ? q[b * p.q_stride_b + t * p.q_stride_t + (h0 + r) * p.q_stride_h + c] : u16(0);
    dos[r][c] = in ? d_out[b * p.do_stride_b + t * p.do_stride_t + (h0 + r) * p.do_stride_h + c] : u16(0);
  }
  __syncthreads();
  // Rows g and g + 8: lse (+inf for a missing or keyless row, so its P is 0) and delta, each
  // lane of the quad summing a quarter of the head dim.
  float lse[2], delta[2];
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const i64 head = h0 + r;
    float dot = 0.0f;
    lse[h] = -neg_inf_f32();
    if (r < rows) {
      const u16* orow = out + b * p.o_stride_b + t * p.o_stride_t + head * p.o_stride_h;
      for (int d = (lane % 4) * (D / 4); d < (lane % 4 + 1) * (D / 4); ++d)
        dot += to_f32<E>(dos[r][d]) * to_f32<E>(orow[d]);
      const float l = p.lse[b * p.lse_stride_b + t * p.lse_stride_t + head * p.lse_stride_h];
      if (l > neg_inf_f32()) lse[h] = l;
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    dot += __shfl_xor_sync(0xffffffffu, dot, 2);
    if (r < rows && p.d_lse) dot -= p.d_lse[b * p.dl_stride_b + t * p.dl_stride_t + head * p.dl_stride_h];
    if (r < rows && lane % 4 == 0) delta_ws[(b * p.seqlen + t) * p.heads_q + head] = dot;
    delta[h] = dot;
  }
  u32 qa[KS][4], da[KS][4];
  load_a<D>(qs, 0, g, q2, qa);
  load_a<D>(dos, 0, g, q2, da);
  float acc[DT][4];
  for (int dt = 0; dt < DT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;

  nsa_for_each_tile(p, task, [&](i64 k0, int n) {
    __syncthreads();  // the previous tile is read by every lane
    nsa_load_kv<D>(p, b, hk, k0, n, ks, vs, lane, 32);
    __syncthreads();
    // Per 16 keys (only their dS live): S = Q K^T, dP = dO V^T, dS = scale P (dP - delta),
    // then dq += dS K.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      float ds[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int nt = 2 * kk + h;
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        times_rows_t<E, D>(sc, qa, ks, nt * 8, g, q2);
        times_rows_t<E, D>(dp, da, vs, nt * 8, g, q2);
        for (int e = 0; e < 4; ++e) {
          const int j = nt * 8 + q2 + (e & 1);
          const float pr = j < n ? expf(sc[e] * p.scale - lse[e / 2]) : 0.0f;
          ds[h][e] = p.scale * pr * (dp[e] - delta[e / 2]);
        }
      }
      acc_times_rows<E, D>(acc, ds[0], ds[1], ks, kk * 16, g, q2);
    }
  });
  u16* dq_out = static_cast<u16*>(p.dq);
  store_rows<E, D>(acc, rows, g, q2,
                   [&](int r) { return dq_out + b * p.dq_stride_b + t * p.dq_stride_t + (h0 + r) * p.dq_stride_h; });
}

// nsa_selects without its early exit: every counted slot is read, so a thread's loads of the
// scan are in flight together instead of one after another.
__device__ __forceinline__ bool selects(const NsaParams& p, i64 b, i64 t, i64 hk, i64 c) {
  const i64 n = nsa_count(p, b, t, hk);
  bool hit = false;
#pragma unroll 4
  for (i64 s = 0; s < n; ++s) hit |= nsa_slot(p, b, t, hk, s) == c;
  return hit;
}

// The dk/dv kernel's shared memory: the key tile's K and V, the batch's Q and dO rows, the scan's
// token offsets and per-warp counts, the batch's tokens (-1: no row), heads, lse and delta.
template <int D> struct KvSmem {
  static constexpr int BK = int(kNsaKeyTile), W = kNsaBwdKvThreads / 32;
  u16 (*ks)[D], (*vs)[D], (*qs)[D], (*dos)[D];
  int *toks, *warp_n, *rtok, *rhead;
  float *rlse, *rdelta;
  __device__ __forceinline__ explicit KvSmem(unsigned char* base) {
    ks = reinterpret_cast<u16(*)[D]>(base);
    vs = ks + BK, qs = vs + BK, dos = qs + 16;
    toks = reinterpret_cast<int*>(dos + 16);
    warp_n = toks + kNsaBwdKvThreads, rtok = warp_n + W, rhead = rtok + 16;
    rlse = reinterpret_cast<float*>(rhead + 16), rdelta = rlse + 16;
  }
};

// One batch of `rows` (token, head) rows into this warp's 16 keys' dk and dv: the rows staged,
// then S^T = K Q^T and dP^T = V dO^T (keys as mma rows), P^T and dS^T kept in registers as the
// A operand of dV += P^T dO and dK += dS^T Q.
template <Elem E, int D>
__device__ __forceinline__ void kv_batch(const NsaParams& p, const float* delta_ws, const KvSmem<D>& sm, i64 b,
                                         i64 hk, i64 k0, int n, int rows, float (*dk)[4], float (*dv)[4]) {
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, q2 = (lane % 4) * 2;
  const i64 group = p.heads_q / p.heads_kv;
  const u16* q = static_cast<const u16*>(p.q);
  const u16* d_out = static_cast<const u16*>(p.d_out);
  for (int i = tid; i < 16 * D; i += kNsaBwdKvThreads) {
    const int r = i / D, c = i % D;
    const bool in = r < rows;
    const i64 t = in ? sm.rtok[r] : 0, h = hk * group + (in ? sm.rhead[r] : 0);
    sm.qs[r][c] = in ? q[b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h + c] : u16(0);
    sm.dos[r][c] = in ? d_out[b * p.do_stride_b + t * p.do_stride_t + h * p.do_stride_h + c] : u16(0);
  }
  if (tid < 16) {
    // lse +inf (P = 0) and token -1 (no key visible) for the batch's empty rows.
    float l = -neg_inf_f32(), dl = 0.0f;
    if (tid < rows) {
      const i64 t = sm.rtok[tid], h = hk * group + sm.rhead[tid];
      const float saved = p.lse[b * p.lse_stride_b + t * p.lse_stride_t + h * p.lse_stride_h];
      if (saved > neg_inf_f32()) l = saved;
      dl = delta_ws[(b * p.seqlen + t) * p.heads_q + h];
    } else {
      sm.rtok[tid] = -1;
    }
    sm.rlse[tid] = l, sm.rdelta[tid] = dl;
  }
  __syncthreads();
  u32 a[D / 16][4];
  float pt[2][4], dst[2][4];
  load_a<D>(sm.ks, warp * 16, g, q2, a);
  for (int nt = 0; nt < 2; ++nt) {
    pt[nt][0] = pt[nt][1] = pt[nt][2] = pt[nt][3] = 0.0f;
    times_rows_t<E, D>(pt[nt], a, sm.qs, nt * 8, g, q2);
  }
  load_a<D>(sm.vs, warp * 16, g, q2, a);
  for (int nt = 0; nt < 2; ++nt) {
    dst[nt][0] = dst[nt][1] = dst[nt][2] = dst[nt][3] = 0.0f;
    times_rows_t<E, D>(dst[nt], a, sm.dos, nt * 8, g, q2);
    for (int e = 0; e < 4; ++e) {
      const int key = warp * 16 + g + 8 * (e / 2), r = nt * 8 + q2 + (e & 1);
      const bool seen = key < n && k0 + key <= i64(sm.rtok[r]);
      const float pr = seen ? expf(pt[nt][e] * p.scale - sm.rlse[r]) : 0.0f;
      pt[nt][e] = pr;
      dst[nt][e] = p.scale * pr * (dst[nt][e] - sm.rdelta[r]);
    }
  }
  acc_times_rows<E, D>(dv, pt[0], pt[1], sm.dos, 0, g, q2);
  acc_times_rows<E, D>(dk, dst[0], dst[1], sm.qs, 0, g, q2);
  __syncthreads();  // the rows are restaged by the next batch
}

template <Elem E, int D> __device__ __attribute__((noinline)) void dkv(const NsaParams& p, const float* delta_ws) {
  constexpr int BK = int(kNsaKeyTile), DT = D / 8, NTH = kNsaBwdKvThreads, W = NTH / 32;
  extern __shared__ __align__(16) unsigned char nsa_bwd_smem[];
  const KvSmem<D> sm(nsa_bwd_smem);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, q2 = (lane % 4) * 2;

  // The task (as the CPU's): sequence b, kv head hk, block c, its tile st of keys [k0, k0 + n).
  const i64 tiles = ceil_div(p.block_size, kNsaKeyTile), blocks = ceil_div(p.seqlen, p.block_size);
  const i64 task = i64(blockIdx.x);
  const i64 st = task % tiles, c = task / tiles % blocks, hk = task / (tiles * blocks) % p.heads_kv,
            b = task / (tiles * blocks * p.heads_kv);
  const i64 k0 = c * p.block_size + st * kNsaKeyTile;
  const i64 end = min_of((c + 1) * p.block_size, p.seqlen);
  if (k0 >= end) return;
  const int n = int(min_of<i64>(BK, end - k0));

  nsa_load_kv<D>(p, b, hk, k0, n, sm.ks, sm.vs, tid, NTH);
  float dk[DT][4], dv[DT][4];
  for (int dt = 0; dt < DT; ++dt)
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;

  const i64 group = p.heads_q / p.heads_kv;
  int pending = 0;  // rows staged in the batch, the same in every thread
  for (i64 t0 = k0; t0 < p.seqlen; t0 += NTH) {
    // The chunk's tokens that selected c, compacted in increasing order (ballot rank within the
    // warp after the earlier warps' counts): the order of every sum below is fixed.
    const i64 t = t0 + tid;
    const bool sel = t < p.seqlen && selects(p, b, t, hk, c);
    const u32 mask = __ballot_sync(0xffffffffu, sel);
    if (lane == 0) sm.warp_n[warp] = __popc(mask);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < W; ++w) before += w < warp ? sm.warp_n[w] : 0, total += sm.warp_n[w];
    if (sel) sm.toks[before + __popc(mask & ((1u << lane) - 1u))] = tid;
    __syncthreads();
    // Its (token, head) rows, token-major, appended to the batch; each full batch is summed.
    const i64 chunk_rows = i64(total) * group;
    for (i64 r0 = 0; r0 < chunk_rows;) {
      const int m = int(min_of<i64>(16 - pending, chunk_rows - r0));
      if (tid < m) {
        const i64 r = r0 + tid;
        sm.rtok[pending + tid] = int(t0 + sm.toks[r / group]);
        sm.rhead[pending + tid] = int(r % group);
      }
      __syncthreads();
      pending += m, r0 += m;
      if (pending == 16) kv_batch<E, D>(p, delta_ws, sm, b, hk, k0, n, 16, dk, dv), pending = 0;
    }
  }
  if (pending > 0) kv_batch<E, D>(p, delta_ws, sm, b, hk, k0, n, pending, dk, dv);

  u16* dk_out = static_cast<u16*>(p.dk);
  u16* dv_out = static_cast<u16*>(p.dv);
  const int keys = int(max_of<i64>(0, min_of<i64>(16, n - warp * 16)));
  auto at = [&](u16* base, i64 sb, i64 stt, i64 sh) {
    return [=](int r) { return base + b * sb + (k0 + warp * 16 + r) * stt + hk * sh; };
  };
  store_rows<E, D>(dk, keys, g, q2, at(dk_out, p.dk_stride_b, p.dk_stride_t, p.dk_stride_h));
  store_rows<E, D>(dv, keys, g, q2, at(dv_out, p.dv_stride_b, p.dv_stride_t, p.dv_stride_h));
}

}  // namespace nsa_bwd_detail

template <Elem E, int D> __device__ __forceinline__ void nsa_bwd(const NsaBwdCudaParams& a) {
  static_assert(E != Elem::f32, "the tensor-core kernels take 16-bit elements");
  static_assert(D % 16 == 0, "head_dim must be a multiple of 16");
  if (a.phase == kNsaBwdDq) nsa_bwd_detail::dq<E, D>(a.p, a.delta);
  else nsa_bwd_detail::dkv<E, D>(a.p, a.delta);
}

}  // namespace ejk::cuda
