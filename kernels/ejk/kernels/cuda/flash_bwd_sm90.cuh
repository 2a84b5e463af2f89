// CUDA flash attention backward, sm_90a: the two kernels of flash_bwd_tc.cuh (dK/dV with K and V
// resident, dQ with Q and dO resident; the same walks, masks and gradient formulas; dQ blocks of
// block_k queries) with their matrix products on wgmma instead of mma.sync. Warpgroups own 64 rows (keys, resp.
// queries), each warp 16 of them, so the accumulators have the mma.sync C-fragment layout and the
// masking and dS code is the mma.sync kernels'. Tiles are cp.async double buffers stored in the
// forward's 128-byte-swizzled layout (sm90/epilogue.cuh sw128_offset), which both wgmma operand
// forms read: S^T = K Q^T and dP^T = V dO^T (both K-major), dV += P^T dO and dK += dS^T Q
// (P^T, dS^T from registers, dO and Q MN-major); in the dQ kernel S = Q K^T, dP = dO V^T,
// dQ += dS K. Deterministic: every output element is written by one block, no atomics.
// Design and what was rejected: docs/design/flash_bwd_sm90.md.
#pragma once
#include "ejk/kernels/cuda/arch.h"
#include "ejk/kernels/cuda/flash_bwd_tc.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90_steps.cuh"
#include "ejk/kernels/cuda/sm90/epilogue.cuh"
#include "ejk/kernels/cuda/wgmma.cuh"

namespace ejk::cuda {

// Whether a variant takes these kernels (flash_bwd_launch.h flash_bwd_wgmma; the others keep
// flash_bwd_tc.cuh).
template <class Cfg> EJK_HD constexpr bool flash_bwd_uses_wgmma() {
  return flash_bwd_wgmma(Cfg::kArch == Arch::sm90a, Cfg::kFlags.bias, Cfg::kFlags.dropout, Cfg::kFlags.dense_mask,
                         Cfg::kD, Cfg::kBlockQ, Cfg::kBlockK);
}

// 16-byte chunks of `valid` rows (the rest zero-filled) of a [rows x D] tile into the swizzled
// layout at shared address dst, by all `threads` threads.
template <int D, int kThreads>
__device__ __forceinline__ void sm90_bwd_load(u32 dst, const u16* src, i64 stride, int rows, int valid) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = r < valid;
    cp_async_16(dst + sm90::sw128_offset(r, c, rows), ok ? src + r * stride + c * 8 : src, ok);
  }
}

// d(64 x N) += A B^T over K = kSteps * 16: A the warpgroup's 64 rows of a K-major tile of a_rows
// rows (at a), B a K-major tile of N rows (at b).
template <int N, Elem E, int kSteps>
__device__ __forceinline__ void sm90_bwd_ss(float* d, u32 a, int a_rows, u32 b) {
  const u64 a0 = smem_desc_sw128(a, 16, 1024), b0 = smem_desc_sw128(b, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) WgmmaSs<N, E>::run1(d, k_major_step(a0, kk, a_rows), k_major_step(b0, kk, N));
}

// d(64 x N) += A B over K = kSteps * 16: A register fragments, B an MN-major tile of b_rows rows
// (the K axis) and N columns at b (64-column boxes b_rows * 128 bytes apart).
template <int N, Elem E, int kSteps>
__device__ __forceinline__ void sm90_bwd_rs(float* d, const u32 (&a)[kSteps][4], u32 b, int b_rows) {
  const u64 b0 = smem_desc_sw128(b, u32(b_rows) * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) WgmmaRs<N, E>::template run1<true>(d, a[kk], smem_desc_advance(b0, kk * 16 * 128));
}

// An accumulator's 8-column tiles packed to the 16-bit A fragments of a k step of 16 columns.
template <Elem E, int NT>
__device__ __forceinline__ void sm90_bwd_pack(u32 (&a)[NT / 2][4], const float (&s)[1][NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = pack2<E>(s[0][2 * kk][0], s[0][2 * kk][1]);
    a[kk][1] = pack2<E>(s[0][2 * kk][2], s[0][2 * kk][3]);
    a[kk][2] = pack2<E>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    a[kk][3] = pack2<E>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// A finished accumulator (times mult) of `rows` rows -> the swizzled tile at smem (free by then)
// -> 16-byte stores of the rows before valid_rows, by all kThreads threads.
template <Elem E, int D, int kThreads>
__device__ __forceinline__ void sm90_bwd_store(const float (&acc)[1][D / 8][4], float mult, unsigned char* smem,
                                               u16* g, i64 stride, int rows, int valid_rows, int warp_row0,
                                               int lane) {
  __syncthreads();  // every warpgroup's products are done with the tile
  const float scale[2] = {mult, mult};
  const int r0 = warp_row0 + (lane >> 2);
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<u32*>(smem + sm90::sw128_offset(r0 + half * 8, dt, rows) + (lane & 3) * 4) =
          pack2<E>(acc[0][dt][2 * half] * scale[half], acc[0][dt][2 * half + 1] * scale[half]);
  __syncthreads();
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < valid_rows)
      *reinterpret_cast<uint4*>(g + r * stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem + sm90::sw128_offset(r, c, rows));
  }
}

// Shared memory of the two kernels: 1 KiB of alignment slack, then the tiles (and in the dK/dV
// kernel the stages' lse, delta and query segment ids); within the tensor-core path's budget
// (flash_bwd_launch.h), which the launch reserves either way.
EJK_HD constexpr long long flash_bwd_sm90_kv_smem(long long d, long long bq, long long bk) {
  return 1024 + 2 * d * (2 * bk + 4 * bq) + 3 * 2 * 4 * bq;
}
EJK_HD constexpr long long flash_bwd_sm90_q_smem(long long d, long long bq, long long bk) {
  return 1024 + 2 * d * (2 * bq + 4 * bk);
}

__device__ __forceinline__ unsigned char* sm90_bwd_smem_base() {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const u32 raw = smem_addr(smem_raw);
  return smem_raw + (((raw + 1023u) & ~1023u) - raw);  // swizzle atoms are 1 KiB aligned
}

// dK and dV of one (sequence, kv head, block_k keys): the mma.sync kernel's walk over the group's
// query heads and visible query tiles, a warpgroup per 64 keys.
template <class Cfg> __device__ void bwd_kv_sm90(const FlashBwdParams& p) {
  using C = BwdKvConfig<Cfg>;  // rows: keys (the mask helpers' constants)
  constexpr Elem E = Cfg::E;
  constexpr int D = Cfg::kD, BK = Cfg::kBlockK, BQ = Cfg::kBlockQ, T = C::kThreads;
  static_assert(T == BK / 64 * 128 && T >= BQ && flash_bwd_sm90_kv_smem(D, BQ, BK) <= flash_bwd_kv_smem(D, BQ, BK));
  constexpr u32 kKV = BK * D * 2, kQ = BQ * D * 2;  // tile bytes
  unsigned char* base = sm90_bwd_smem_base();
  const u32 sK = smem_addr(base), sV = sK + kKV, sQ = sV + kKV, sdO = sQ + 2 * kQ;  // sQ, sdO: [2]
  float* sLse = reinterpret_cast<float*>(base + 2 * kKV + 4 * kQ);  // [2][BQ]
  float* sDelta = sLse + 2 * BQ;
  i32* sSeg = reinterpret_cast<i32*>(sDelta + 2 * BQ);
  const FlashFwdParams& f = p.fwd;
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, BK), t = blockIdx.x;
  const SeqSpan seq = sequence_span(f, t / (f.heads_kv * kblocks));
  const i64 hk = t / kblocks % f.heads_kv, k0 = (t % kblocks) * BK;
  if (k0 >= seq.len_k) return;
  // wg from lane 0: ptxas then knows it warp-uniform and keeps the operands' descriptors in
  // uniform registers (as flash_fwd_sm90.cuh does).
  const int lane = threadIdx.x & 31, warp_row0 = (threadIdx.x >> 5) * 16;
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x >> 7), 0);
  const int valid_k = int(min_of<i64>(BK, seq.len_k - k0));
  const i64 krow = seq.k_begin + k0;
  sm90_bwd_load<D, T>(sK, static_cast<const u16*>(f.k) + seq.b * f.k_stride_b + krow * f.k_stride_s + hk * f.k_stride_h,
                      f.k_stride_s, BK, valid_k);
  sm90_bwd_load<D, T>(sV, static_cast<const u16*>(f.v) + seq.b * f.v_stride_b + krow * f.v_stride_s + hk * f.v_stride_h,
                      f.v_stride_s, BK, valid_k);

  const MaskSpec m = variant_mask<C::kFlags>(f.mask);
  const TileRange qt = visible_query_tiles<bounded_mask(C::kFlags)>(m, k0, k0 + valid_k - 1, seq.len_q, BQ);
  const i64 group = f.heads_q / f.heads_kv;
  const bool segments = C::kSegments && f.q_segment_ids != nullptr;
  const QueryStepRange walk{qt, group * qt.count()};
  auto load_q = [&](i64 step, int stage) {
    const i64 h = hk * group + walk.head(step), q0 = i64(walk.tile(step)) * BQ;
    const int valid_q = int(min_of<i64>(BQ, seq.len_q - q0));
    const i64 row = seq.q_begin + q0;
    sm90_bwd_load<D, T>(sQ + stage * kQ, static_cast<const u16*>(f.q) + seq.b * f.q_stride_b + row * f.q_stride_s + h * f.q_stride_h,
                        f.q_stride_s, BQ, valid_q);
    sm90_bwd_load<D, T>(sdO + stage * kQ,
                        static_cast<const u16*>(p.d_out) + seq.b * p.do_stride_b + row * p.do_stride_s + h * p.do_stride_h,
                        p.do_stride_s, BQ, valid_q);
  };
  // A query tile's lse, delta and segment ids are read into registers a step before they are
  // staged in shared memory (by the thread of each row: T >= BQ), so that no store waits for its
  // global load ahead of the step's products. Rows past the sequence keep the defaults (an lse
  // of -inf reads as +inf: probability 0).
  struct Rows {
    float lse, delta;
    i32 seg;
  };
  auto fetch_rows = [&](i64 at) {
    Rows v{neg_inf_f32(), 0.f, -1};
    const int r = threadIdx.x;
    if (r < BQ && !walk.done(at)) {
      const i64 h = hk * group + walk.head(at), i = i64(walk.tile(at)) * BQ + r;
      if (i < seq.len_q) {
        v.lse = f.lse[bwd_row_at(f, seq, h, i)];
        v.delta = p.delta[bwd_row_at(f, seq, h, i)];
        if (segments) v.seg = f.q_segment_ids[seq.index * f.q_seg_stride_b + i];
      }
    }
    return v;
  };
  auto stage_rows = [&](const Rows& v, int stage) {
    const int r = threadIdx.x;
    if (r >= BQ) return;
    sLse[stage * BQ + r] = bwd_lse_to_log2(v.lse);
    sDelta[stage * BQ + r] = v.delta;
    if (segments) sSeg[stage * BQ + r] = v.seg;
  };
  i64 step = walk.first();
  if (!walk.done(step)) load_q(step, 0);
  cp_async_commit();
  stage_rows(fetch_rows(step), 0);
  Rows ahead = fetch_rows(walk.next(step));  // the next step's

  i32 k_seg[2] = {0, 0};  // the key segment of each row this lane owns (clamped into the sequence)
  if (segments)
    for (int half = 0; half < 2; ++half)
      k_seg[half] = f.kv_segment_ids[seq.index * f.kv_seg_stride_b +
                                     min_of<i64>(k0 + warp_row0 + (lane >> 2) + half * 8, seq.len_k - 1)];
  const float cap_ln2 = C::kSoftcap ? kLn2 / f.softcap : 0.f;
  float dk[1][D / 8][4], dv[1][D / 8][4];
  zero<D / 8>(dk);
  zero<D / 8>(dv);
  for (; !walk.done(step);) {
    cp_async_wait<0>();
    fence_proxy_async_smem();  // the copies (generic proxy) before the wgmmas (async proxy) read them
    __syncthreads();           // this step's tiles visible; every warpgroup done with the other stage
    const i64 following = walk.next(step);
    const int stage = int(walk.ordinal(step, 0) & 1);
    if (!walk.done(following)) load_q(following, stage ^ 1);
    cp_async_commit();
    stage_rows(ahead, stage ^ 1);  // read by the following step, after its barrier
    ahead = fetch_rows(walk.next(following));
    const i64 q0 = i64(walk.tile(step)) * BQ;
    const u32 q_tile = sQ + stage * kQ, do_tile = sdO + stage * kQ;
    float s[1][BQ / 8][4], dp[1][BQ / 8][4];
    zero<BQ / 8>(s);
    zero<BQ / 8>(dp);
    // The zeros written before the fence: left for later, they made ptxas insert a
    // warpgroup.arrive and wait between the two products.
    fence_operands<BQ / 2>(&s[0][0][0]);
    fence_operands<BQ / 2>(&dp[0][0][0]);
    wgmma_fence();
    sm90_bwd_ss<BQ, E, D / 16>(&s[0][0][0], sK + wg * 64 * 128, BK, q_tile);  // S^T = K Q^T
    wgmma_commit();
    sm90_bwd_ss<BQ, E, D / 16>(&dp[0][0][0], sV + wg * 64 * 128, BK, do_tile);  // dP^T = V dO^T
    wgmma_commit();
    wgmma_wait<1>();  // S^T; dP^T may still run
    fence_operands<BQ / 2>(&s[0][0][0]);
    bwd_logits<C>(s, f);
    const bool masked = !tile_fully_visible<bounded_mask(C::kFlags)>(m, q0, q0 + BQ - 1, k0, k0 + BK - 1);
    const int col0 = 2 * (lane & 3);
    const float* lse = sLse + stage * BQ;
    const float* delta = sDelta + stage * BQ;
    // Element (nt, i) of the accumulators is key row (lane / 4 + 8 (i / 2)) of the warp's 16 and
    // query column nt * 8 + col0 + i % 2 of the tile.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 j = k0 + warp_row0 + (lane >> 2) + half * 8;
      auto clamp = [](i64 v) { return int(min_of<i64>(max_of<i64>(v, -1), BQ)); };
      const int lo = masked ? clamp(first_visible_query(j, m) - q0 - col0) : 0;
      const int hi = masked ? clamp(last_visible_query(j, m) - q0 - col0) : BQ;
#pragma unroll
      for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = nt * 8 + e, q = col + col0;
          float& x = s[0][nt][2 * half + e];
          if (col < lo || col > hi) x = neg_inf_f32();
          if (segments && !segment_visible(sSeg[stage * BQ + q], k_seg[half])) x = neg_inf_f32();
          if constexpr (!C::kSoftcap) x = bwd_prob(x, lse[q]);
        }
    }
    // dS^T once dP^T is done (with a soft cap P too: its Jacobian needs the logits). Issuing
    // dV before forming dS^T kept P^T, dS^T and the fp32 P^T live beside both accumulators
    // (spills at head_dim 128).
    wgmma_wait<0>();
    fence_operands<BQ / 2>(&dp[0][0][0]);
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int q = nt * 8 + col0 + i % 2;
        if constexpr (C::kSoftcap) bwd_grad(s[0][nt][i], dp[0][nt][i], lse[q], delta[q], cap_ln2);
        else dp[0][nt][i] = bwd_ds_uncapped(s[0][nt][i], dp[0][nt][i], delta[q]);
      }
    u32 pa[BQ / 16][4], da[BQ / 16][4];
    sm90_bwd_pack<E, BQ / 8>(pa, s);
    sm90_bwd_pack<E, BQ / 8>(da, dp);
    wgmma_fence();
    sm90_bwd_rs<D, E, BQ / 16>(&dv[0][0][0], pa, do_tile, BQ);  // dV += P^T dO
    sm90_bwd_rs<D, E, BQ / 16>(&dk[0][0][0], da, q_tile, BQ);  // dK += dS^T Q
    wgmma_commit();
    wgmma_wait<0>();  // the stage is reloaded after the next barrier
    fence_operands<D / 2>(&dv[0][0][0]);
    fence_operands<D / 2>(&dk[0][0][0]);
    step = following;
  }
  cp_async_wait<0>();
  sm90_bwd_store<E, D, T>(dk, f.scale, base,
                          static_cast<u16*>(p.dk) + seq.b * p.dk_stride_b + krow * p.dk_stride_s + hk * p.dk_stride_h,
                          p.dk_stride_s, BK, valid_k, warp_row0, lane);
  sm90_bwd_store<E, D, T>(dv, 1.f, base + kKV,
                          static_cast<u16*>(p.dv) + seq.b * p.dv_stride_b + krow * p.dv_stride_s + hk * p.dv_stride_h,
                          p.dv_stride_s, BK, valid_k, warp_row0, lane);
}

// dQ of one (sequence, q head, block_k queries) over the visible tiles of block_q keys, a
// warpgroup per 64 queries.
template <class Cfg> __device__ void bwd_q_sm90(const FlashBwdParams& p) {
  // Blocks of block_k queries over tiles of block_q keys (flash_bwd_launch.h flash_bwd_dq_shape):
  // both kernels' blocks then hold block_k rows and share each streamed tile among as many
  // warpgroups.
  constexpr Elem E = Cfg::E;
  constexpr int D = Cfg::kD, BQ = Cfg::kBlockK, BK = Cfg::kBlockQ;
  using C = FlashFwdSm80Config<E, D, BQ, BK, Cfg::kFlags, 16>;  // rows: queries
  constexpr int T = C::kThreads;
  static_assert(T == BQ / 64 * 128 && flash_bwd_sm90_q_smem(D, BQ, BK) <= flash_bwd_q_smem(D, BQ, BK));
  constexpr u32 kKV = BK * D * 2, kQ = BQ * D * 2;
  unsigned char* base = sm90_bwd_smem_base();
  const u32 sQ = smem_addr(base), sdO = sQ + kQ, sK = sdO + kQ, sV = sK + 2 * kKV;  // sK, sV: [2]
  const FlashFwdParams& f = p.fwd;
  const i64 qblocks = ceil_div<i64>(f.seqlen_q, BQ), t = blockIdx.x;
  const SeqSpan seq = sequence_span(f, t / (f.heads_q * qblocks));
  const i64 h = t / qblocks % f.heads_q, hk = h / (f.heads_q / f.heads_kv);
  const i64 q0 = (qblocks - 1 - t % qblocks) * BQ;  // heaviest (causal) blocks first
  if (q0 >= seq.len_q) return;
  // wg from lane 0: ptxas then knows it warp-uniform and keeps the operands' descriptors in
  // uniform registers (as flash_fwd_sm90.cuh does).
  const int lane = threadIdx.x & 31, warp_row0 = (threadIdx.x >> 5) * 16;
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x >> 7), 0);
  const int valid_q = int(min_of<i64>(BQ, seq.len_q - q0));
  const i64 row = seq.q_begin + q0;
  sm90_bwd_load<D, T>(sQ, static_cast<const u16*>(f.q) + seq.b * f.q_stride_b + row * f.q_stride_s + h * f.q_stride_h,
                      f.q_stride_s, BQ, valid_q);
  sm90_bwd_load<D, T>(sdO, static_cast<const u16*>(p.d_out) + seq.b * p.do_stride_b + row * p.do_stride_s + h * p.do_stride_h,
                      p.do_stride_s, BQ, valid_q);
  const u16* gK = static_cast<const u16*>(f.k) + seq.b * f.k_stride_b + seq.k_begin * f.k_stride_s + hk * f.k_stride_h;
  const u16* gV = static_cast<const u16*>(f.v) + seq.b * f.v_stride_b + seq.k_begin * f.v_stride_s + hk * f.v_stride_h;
  const MaskSpec m = variant_mask<C::kFlags>(f.mask);
  const KeyTileRange walk{key_range<C>(m, q0, seq.len_k)};
  auto load_kv = [&](int tile, int stage) {
    const i64 k0 = i64(tile) * BK;
    const int valid_k = int(min_of<i64>(BK, seq.len_k - k0));
    sm90_bwd_load<D, T>(sK + stage * kKV, gK + k0 * f.k_stride_s, f.k_stride_s, BK, valid_k);
    sm90_bwd_load<D, T>(sV + stage * kKV, gV + k0 * f.v_stride_s, f.v_stride_s, BK, valid_k);
  };
  int tile = walk.first();
  if (!walk.done(tile)) load_kv(tile, 0);
  cp_async_commit();

  const TileContext<C> ctx = tile_context<C>(f, seq, h, q0, warp_row0, lane);
  float lse2[2], delta[2];
  bwd_row_stats(p, seq, h, q0 + warp_row0 + (lane >> 2), lse2, delta);
  const float cap_ln2 = C::kSoftcap ? kLn2 / f.softcap : 0.f;
  float dq[1][D / 8][4];
  zero<D / 8>(dq);
  for (; !walk.done(tile);) {
    cp_async_wait<0>();
    fence_proxy_async_smem();
    __syncthreads();
    const int following = walk.next(tile);
    const int stage = walk.ordinal(tile, 0) & 1;
    if (!walk.done(following)) load_kv(following, stage ^ 1);
    cp_async_commit();
    const i64 k0 = i64(tile) * BK;
    const u32 k_tile = sK + stage * kKV, v_tile = sV + stage * kKV;
    float s[1][BK / 8][4], dp[1][BK / 8][4];
    zero<BK / 8>(s);
    zero<BK / 8>(dp);
    // The zeros written before the fence: left for later, they made ptxas insert a
    // warpgroup.arrive and wait between the two products.
    fence_operands<BK / 2>(&s[0][0][0]);
    fence_operands<BK / 2>(&dp[0][0][0]);
    wgmma_fence();
    sm90_bwd_ss<BK, E, D / 16>(&s[0][0][0], sQ + wg * 64 * 128, BQ, k_tile);  // S = Q K^T
    wgmma_commit();
    sm90_bwd_ss<BK, E, D / 16>(&dp[0][0][0], sdO + wg * 64 * 128, BQ, v_tile);  // dP = dO V^T
    wgmma_commit();
    wgmma_wait<1>();  // S; P is formed while dP runs
    fence_operands<BK / 2>(&s[0][0][0]);
    bwd_logits<C>(s, f);
    if (tile_needs_mask<C>(m, q0, k0, seq.len_k)) mask_logits<C>(s, ctx, m, seq, k0, lane);
    if constexpr (C::kSegments) mask_segments<C>(s, ctx, seq, k0, lane);
    if constexpr (!C::kSoftcap) {
#pragma unroll
      for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[0][nt][i] = bwd_prob(s[0][nt][i], lse2[i / 2]);
    }
    wgmma_wait<0>();
    fence_operands<BK / 2>(&dp[0][0][0]);
#pragma unroll
    for (int nt = 0; nt < BK / 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if constexpr (C::kSoftcap) bwd_grad(s[0][nt][i], dp[0][nt][i], lse2[i / 2], delta[i / 2], cap_ln2);
        else dp[0][nt][i] = bwd_ds_uncapped(s[0][nt][i], dp[0][nt][i], delta[i / 2]);
      }
    u32 da[BK / 16][4];
    sm90_bwd_pack<E, BK / 8>(da, dp);
    wgmma_fence();
    sm90_bwd_rs<D, E, BK / 16>(&dq[0][0][0], da, k_tile, BK);  // dQ += dS K
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands<D / 2>(&dq[0][0][0]);
    tile = following;
  }
  cp_async_wait<0>();
  sm90_bwd_store<E, D, T>(dq, f.scale, base,
                          static_cast<u16*>(p.dq) + seq.b * p.dq_stride_b + row * p.dq_stride_s + h * p.dq_stride_h,
                          p.dq_stride_s, BQ, valid_q, warp_row0, lane);
}

}  // namespace ejk::cuda
