// CUDA flash attention backward on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async; sm80 and
// sm90a), FA2-style, deterministic (every output element written by one block, no atomics):
//   delta: one warp per query row, delta = d_out . out - d_lse into an f32 workspace;
//   kv:    one block per (sequence, kv head, block_k keys), K and V resident, looping over the
//          group's query heads and the visible query tiles: S^T = K Q^T, P^T, dV += P^T dO,
//          dP^T = V dO^T, dS^T = P^T (dP^T - delta) (softcap Jacobian), dK += dS^T Q;
//   q:     one block per (sequence, q head, block_q queries): S and dP recomputed, dQ += dS K.
// Warps own 16 rows (keys, resp. queries), so P and dS stay in registers as A operands. The
// tile pieces (loads, the two products, the logit transform and masks) are the sm80 forward's.
#pragma once
#include "ejk/kernels/common/flash_bwd_params.h"
#include "ejk/kernels/cuda/flash_bwd_launch.h"
#include "ejk/kernels/cuda/flash_dropout.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"

namespace ejk::cuda {

__device__ __forceinline__ i64 bwd_row_at(const FlashFwdParams& f, const SeqSpan& seq, i64 h, i64 i) {
  return seq.b * f.lse_stride_b + h * f.lse_stride_h + seq.q_begin + i;
}

// lse in log2 units for P = exp2(x - lse); rows without a visible key (-inf) and rows past the
// sequence read +inf, so that their probabilities are 0 whatever their logits.
__device__ __forceinline__ float bwd_lse_log2(const FlashFwdParams& f, const SeqSpan& seq, i64 h, i64 i) {
  if (i >= seq.len_q) return __int_as_float(0x7f800000);
  const float lse = f.lse[bwd_row_at(f, seq, h, i)];
  return lse == neg_inf_f32() ? __int_as_float(0x7f800000) : lse * kLog2e;
}
// bwd_lse_log2's mapping of an lse read earlier (-inf for rows past the sequence); bwd_lse_log2
// keeps its own expression, since calling this changed the code of the kernels that use it.
__device__ __forceinline__ float bwd_lse_to_log2(float lse) {
  return lse == neg_inf_f32() ? __int_as_float(0x7f800000) : lse * kLog2e;
}

// lse (log2 units) and delta of a dq pass lane's rows i0 and i0 + 8 (its C fragments' rows).
__device__ __forceinline__ void bwd_row_stats(const FlashBwdParams& p, const SeqSpan& seq, i64 h, i64 i0,
                                              float (&lse2)[2], float (&delta)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const i64 i = i0 + half * 8;
    lse2[half] = bwd_lse_log2(p.fwd, seq, h, i);
    delta[half] = i < seq.len_q ? p.delta[bwd_row_at(p.fwd, seq, h, i)] : 0.f;
  }
}

template <class Cfg> __device__ void bwd_delta_rows(const FlashBwdParams& p) {
  constexpr Elem E = Cfg::E;
  const FlashFwdParams& f = p.fwd;
  const bool varlen = f.cu_seqlens_q != nullptr;
  const i64 rows = varlen ? f.total_q : f.seqlen_q;
  const i64 r = i64(blockIdx.x) * (kFlashBwdDeltaThreads / 32) + threadIdx.x / 32;
  if (r >= f.heads_q * rows * (varlen ? 1 : f.batch)) return;
  const i64 b = varlen ? 0 : r / (f.heads_q * rows), h = r / rows % f.heads_q, i = r % rows;
  const u16* d_out = static_cast<const u16*>(p.d_out) + b * p.do_stride_b + i * p.do_stride_s + h * p.do_stride_h;
  const u16* out = static_cast<const u16*>(f.out) + b * f.o_stride_b + i * f.o_stride_s + h * f.o_stride_h;
  float acc = 0.f;
  for (int d = threadIdx.x & 31; d < Cfg::kD; d += 32) acc += to_f32<E>(d_out[d]) * to_f32<E>(out[d]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  const i64 at = b * f.lse_stride_b + h * f.lse_stride_h + i;
  if ((threadIdx.x & 31) == 0) p.delta[at] = p.d_lse ? acc - p.d_lse[at] : acc;
}

// A finished accumulator tile (times mult) -> shared (rows of C::kBlockQ at C::kRowPitch) ->
// 16-byte stores of the rows before valid_rows.
template <class C>
__device__ __forceinline__ void bwd_store_tile(const float (&acc)[C::kMTiles][C::kDTiles][4], float mult, u16* smem,
                                               u16* g, i64 stride, int valid_rows, int warp_row0, int lane) {
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + (lane >> 2) + half * 8;
#pragma unroll
      for (int dt = 0; dt < C::kDTiles; ++dt)
        *reinterpret_cast<u32*>(smem + r * C::kRowPitch + dt * 8 + (lane & 3) * 2) =
            pack2<C::kElem>(acc[mt][dt][2 * half] * mult, acc[mt][dt][2 * half + 1] * mult);
    }
  __syncthreads();
  constexpr int kChunks = C::kHeadDim / 8;
  for (int i = threadIdx.x; i < C::kBlockQ * kChunks; i += C::kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    if (r < valid_rows)
      *reinterpret_cast<uint4*>(g + r * stride + c * 8) = *reinterpret_cast<const uint4*>(smem + r * C::kRowPitch + c * 8);
  }
}

template <class C> __device__ __forceinline__ void bwd_zero(float (&a)[C::kMTiles][C::kDTiles][4]) {
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < C::kDTiles; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) a[mt][dt][i] = 0.f;
}

// The logit transform of mask.h without a bias, to log2 units (elementwise: the same for S and S^T).
template <class C>
__device__ __forceinline__ void bwd_logits(float (&s)[C::kMTiles][C::kNTiles][4], const FlashFwdParams& f) {
  const float inv_cap = C::kSoftcap ? 1.f / f.softcap : 0.f;
  auto tanh_fn = [](float v) { return fast_tanh(v); };
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        s[mt][nt][i] = transform_logit<false, C::kSoftcap>(s[mt][nt][i] * f.scale, 0.f, f.softcap, inv_cap, tanh_fn) * kLog2e;
}

// The two halves of bwd_grad for kernels that take P before dP is ready (flash_bwd_sm90.cuh;
// without a soft cap, whose Jacobian needs the logit): P from the log2 logit x, then dS.
__device__ __forceinline__ float bwd_prob(float x, float lse2) { return fast_exp2(prob_exponent(x, lse2)); }
__device__ __forceinline__ float bwd_ds_uncapped(float prob, float dp, float delta) { return prob * (dp - delta); }

// dS from log2 logits x (-inf: masked), dP, the row's (or column's) lse and delta: P into x,
// dS (with the softcap Jacobian 1 - (s / cap)^2) into dp.
__device__ __forceinline__ void bwd_grad(float& x, float& dp, float lse2, float delta, float cap_ln2) {
  const float prob = bwd_prob(x, lse2);
  float ds = bwd_ds_uncapped(prob, dp, delta);
  if (cap_ln2 != 0.f) {
    const float t = x * cap_ln2;
    ds = prob > 0.f ? ds * (1.f - t * t) : 0.f;
  }
  x = prob;
  dp = ds;
}

// bwd_grad of a dropout variant, z the pair's factor (keep / (1 - p) or 0): x becomes the dropped
// weight (for dV), dp the gradient P (z dP - delta) (flash_bwd_params.h).
__device__ __forceinline__ void bwd_grad_dropped(float& x, float& dp, float lse2, float delta, float cap_ln2,
                                                 float z) {
  const float prob = fast_exp2(prob_exponent(x, lse2));
  float ds = prob * (z * dp - delta);
  if (cap_ln2 != 0.f) {
    const float t = x * cap_ln2;
    ds = prob > 0.f ? ds * (1.f - t * t) : 0.f;
  }
  x = prob * z;
  dp = ds;
}

// The (query head of the group, query tile) steps a dK/dV block visits, head-major: flash
// attention's are every visible query tile of every head. Another walk (block-sparse attention's
// layout columns, blocksparse_bwd.cuh) skips steps; the kernel body takes any type with these
// members.
struct QueryStepRange {
  TileRange qt;  // the query tiles visible by position
  i64 steps;     // heads of the group x qt.count()
  __device__ __forceinline__ i64 first() const { return 0; }
  __device__ __forceinline__ i64 next(i64 step) const { return step + 1; }
  __device__ __forceinline__ bool done(i64 step) const { return step >= steps; }
  __device__ __forceinline__ i64 head(i64 step) const { return step / qt.count(); }  // in the group
  __device__ __forceinline__ int tile(i64 step) const { return qt.begin + int(step % qt.count()); }
  // The step's position in the walk (the stage ring's): the step itself, n (steps done) unused.
  __device__ __forceinline__ i64 ordinal(i64 step, int) const { return step; }
};

// The two kernels' tile configs: dK/dV blocks own keys (rows), dQ blocks queries.
template <class Cfg> using BwdKvConfig = FlashFwdSm80Config<Cfg::E, Cfg::kD, Cfg::kBlockK, Cfg::kBlockQ, Cfg::kFlags, 16>;
template <class Cfg> using BwdQConfig = FlashFwdSm80Config<Cfg::E, Cfg::kD, Cfg::kBlockQ, Cfg::kBlockK, Cfg::kFlags, 16>;

// dK and dV of one (sequence, kv head, block_k keys) over the steps make_walk(m, seq, hk, k0,
// valid_k, qt, tail) returns; `tail` is the shared memory past the staged tiles, and every thread
// calls it once (a walk may build itself there, with barriers).
template <class Cfg, class MakeWalk> __device__ void bwd_kv_tc_walk(const FlashBwdParams& p, MakeWalk&& make_walk) {
  using C = BwdKvConfig<Cfg>;  // rows: keys
  constexpr int BK = Cfg::kBlockK, BQ = Cfg::kBlockQ, P = C::kRowPitch;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16* sK = reinterpret_cast<u16*>(smem_raw);
  u16* sV = sK + BK * P;
  u16* sQ = sV + BK * P;     // [2][BQ * P]
  u16* sdO = sQ + 2 * BQ * P;  // [2][BQ * P]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * BQ * P);  // [2][BQ]
  float* sDelta = sLse + 2 * BQ;
  i32* sSeg = reinterpret_cast<i32*>(sDelta + 2 * BQ);
  const FlashFwdParams& f = p.fwd;
  const i64 kblocks = ceil_div<i64>(f.seqlen_k, BK), t = blockIdx.x;
  const SeqSpan seq = sequence_span(f, t / (f.heads_kv * kblocks));
  const i64 hk = t / kblocks % f.heads_kv, k0 = (t % kblocks) * BK;
  if (k0 >= seq.len_k) return;
  const int lane = threadIdx.x & 31, warp_row0 = (threadIdx.x >> 5) * 16;
  const int valid_k = int(min_of<i64>(BK, seq.len_k - k0));
  const u16* gK = static_cast<const u16*>(f.k) + seq.b * f.k_stride_b + (seq.k_begin + k0) * f.k_stride_s + hk * f.k_stride_h;
  const u16* gV = static_cast<const u16*>(f.v) + seq.b * f.v_stride_b + (seq.k_begin + k0) * f.v_stride_s + hk * f.v_stride_h;
  load_tile_async<C>(sK, gK, f.k_stride_s, BK, valid_k);
  load_tile_async<C>(sV, gV, f.v_stride_s, BK, valid_k);

  const MaskSpec m = variant_mask<C::kFlags>(f.mask);
  const TileRange qt = visible_query_tiles<bounded_mask(C::kFlags)>(m, k0, k0 + valid_k - 1, seq.len_q, BQ);
  const i64 group = f.heads_q / f.heads_kv;
  const bool segments = C::kSegments && f.q_segment_ids != nullptr;
  const auto walk = make_walk(m, seq, hk, k0, valid_k, qt, reinterpret_cast<unsigned char*>(sSeg + 2 * BQ));
  auto load_q = [&](i64 step, int stage) {
    const i64 h = hk * group + walk.head(step), q0 = i64(walk.tile(step)) * BQ;
    const int valid_q = int(min_of<i64>(BQ, seq.len_q - q0));
    const i64 row = seq.q_begin + q0;
    load_tile_async<C>(sQ + stage * BQ * P, static_cast<const u16*>(f.q) + seq.b * f.q_stride_b + row * f.q_stride_s + h * f.q_stride_h,
                       f.q_stride_s, BQ, valid_q);
    load_tile_async<C>(sdO + stage * BQ * P,
                       static_cast<const u16*>(p.d_out) + seq.b * p.do_stride_b + row * p.do_stride_s + h * p.do_stride_h,
                       p.do_stride_s, BQ, valid_q);
    for (int r = threadIdx.x; r < BQ; r += C::kThreads) {
      const i64 i = q0 + r;
      sLse[stage * BQ + r] = bwd_lse_log2(f, seq, h, i);
      sDelta[stage * BQ + r] = i < seq.len_q ? p.delta[bwd_row_at(f, seq, h, i)] : 0.f;
      if (segments) sSeg[stage * BQ + r] = i < seq.len_q ? f.q_segment_ids[seq.index * f.q_seg_stride_b + i] : -1;
    }
  };
  i64 step = walk.first();
  if (!walk.done(step)) load_q(step, 0);
  cp_async_commit();

  // The key segment of each row this lane owns (clamped into the sequence: rows past it are not stored).
  i32 k_seg[2] = {0, 0};
  if (segments)
    for (int half = 0; half < 2; ++half)
      k_seg[half] = f.kv_segment_ids[seq.index * f.kv_seg_stride_b +
                                     min_of<i64>(k0 + warp_row0 + (lane >> 2) + half * 8, seq.len_k - 1)];
  const float cap_ln2 = C::kSoftcap ? kLn2 / f.softcap : 0.f;
  float dk[C::kMTiles][C::kDTiles][4], dv[C::kMTiles][C::kDTiles][4];
  bwd_zero<C>(dk);
  bwd_zero<C>(dv);
  for (int n = 0; !walk.done(step); ++n) {  // n: steps done
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles visible; every warp done with the other stage
    const i64 following = walk.next(step);
    const int stage = int(walk.ordinal(step, n) & 1);
    if (!walk.done(following)) load_q(following, stage ^ 1);
    cp_async_commit();
    const i64 q0 = i64(walk.tile(step)) * BQ;
    const u16* q_tile = sQ + stage * BQ * P;
    const u16* do_tile = sdO + stage * BQ * P;
    float s[C::kMTiles][C::kNTiles][4], dp[C::kMTiles][C::kNTiles][4];
    qk_tile<C>(s, sK, q_tile, warp_row0, lane);  // S^T
    qk_tile<C>(dp, sV, do_tile, warp_row0, lane);  // dP^T
    bwd_logits<C>(s, f);
    const bool masked = !tile_fully_visible<bounded_mask(C::kFlags)>(m, q0, q0 + BQ - 1, k0, k0 + BK - 1);
    const int col0 = 2 * (lane & 3);
    bool dense = false;  // the dense mask hides some pair of the tile
    i64 step_head = 0;
    if constexpr (C::kFlags.dense_mask) dense = walk.partial(step), step_head = hk * group + walk.head(step);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 j = k0 + warp_row0 + (lane >> 2) + half * 8;
      auto clamp = [](i64 v) { return int(min_of<i64>(max_of<i64>(v, -1), BQ)); };
      const int lo = masked ? clamp(first_visible_query(j, m) - q0 - col0) : 0;
      const int hi = masked ? clamp(last_visible_query(j, m) - q0 - col0) : BQ;
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = nt * 8 + e, q = col + col0;
          float& x = s[0][nt][2 * half + e];
          if (col < lo || col > hi) x = neg_inf_f32();
          if (segments && !segment_visible(sSeg[stage * BQ + q], k_seg[half])) x = neg_inf_f32();
          // Rows are keys here: query q0 + q's mask row at key j (both inside the sequence).
          if (dense && q0 + q < seq.len_q && j < seq.len_k &&
              !dense_mask_visible(flash_mask_row(f, seq.index, step_head, q0 + q), j))
            x = neg_inf_f32();
          if constexpr (C::kFlags.dropout) {
            // Rows are keys here: every element is its own (query, key block) Philox draw.
            const i64 h = hk * group + walk.head(step);
            const float z = dropout_factor(flash_dropout(p), seq.index, h, q0 + q, j);
            bwd_grad_dropped(x, dp[0][nt][2 * half + e], sLse[stage * BQ + q], sDelta[stage * BQ + q], cap_ln2, z);
          } else {
            bwd_grad(x, dp[0][nt][2 * half + e], sLse[stage * BQ + q], sDelta[stage * BQ + q], cap_ln2);
          }
        }
    }
    pv_tile<C>(dv, s, do_tile, lane);  // dV += P^T dO
    pv_tile<C>(dk, dp, q_tile, lane);  // dK += dS^T Q
    step = following;
  }
  cp_async_wait<0>();
  bwd_store_tile<C>(dk, f.scale, sK,
                    static_cast<u16*>(p.dk) + seq.b * p.dk_stride_b + (seq.k_begin + k0) * p.dk_stride_s + hk * p.dk_stride_h,
                    p.dk_stride_s, valid_k, warp_row0, lane);
  bwd_store_tile<C>(dv, 1.f, sV,
                    static_cast<u16*>(p.dv) + seq.b * p.dv_stride_b + (seq.k_begin + k0) * p.dv_stride_s + hk * p.dv_stride_h,
                    p.dv_stride_s, valid_k, warp_row0, lane);
}

template <class Cfg> __device__ void bwd_kv_tc(const FlashBwdParams& p) {
  const i64 group = p.fwd.heads_q / p.fwd.heads_kv;
  if constexpr (Cfg::kFlags.dense_mask) {
    bwd_kv_tc_walk<Cfg>(p, [&](const MaskSpec&, const SeqSpan& seq, i64 hk, i64 k0, int, TileRange qt, unsigned char*) {
      return DenseQueryStepWalk{qt,           group * qt.count(), &p.fwd, seq.index, hk * group, k0 / Cfg::kBlockK,
                                Cfg::kBlockQ, Cfg::kBlockK};
    });
  } else {
    bwd_kv_tc_walk<Cfg>(p, [&](const MaskSpec&, const SeqSpan&, i64, i64, int, TileRange qt, unsigned char*) {
      return QueryStepRange{qt, group * qt.count()};
    });
  }
}

// dQ of one (sequence, q head, block_q queries) over the key tiles make_walk(m, seq, h, q0, tail)
// returns (the forward's walks, flash_fwd_sm80.cuh).
template <class Cfg, class MakeWalk> __device__ void bwd_q_tc_walk(const FlashBwdParams& p, MakeWalk&& make_walk) {
  using C = BwdQConfig<Cfg>;  // rows: queries
  constexpr int BK = Cfg::kBlockK, BQ = Cfg::kBlockQ, P = C::kRowPitch;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16* sQ = reinterpret_cast<u16*>(smem_raw);
  u16* sdO = sQ + BQ * P;
  u16* sK = sdO + BQ * P;     // [2][BK * P]
  u16* sV = sK + 2 * BK * P;  // [2][BK * P]
  const FlashFwdParams& f = p.fwd;
  const i64 qblocks = ceil_div<i64>(f.seqlen_q, BQ), t = blockIdx.x;
  const SeqSpan seq = sequence_span(f, t / (f.heads_q * qblocks));
  const i64 h = t / qblocks % f.heads_q, hk = h / (f.heads_q / f.heads_kv);
  const i64 q0 = (qblocks - 1 - t % qblocks) * BQ;  // heaviest (causal) blocks first
  if (q0 >= seq.len_q) return;
  const int lane = threadIdx.x & 31, warp_row0 = (threadIdx.x >> 5) * 16;
  const int valid_q = int(min_of<i64>(BQ, seq.len_q - q0));
  const i64 row = seq.q_begin + q0;
  load_tile_async<C>(sQ, static_cast<const u16*>(f.q) + seq.b * f.q_stride_b + row * f.q_stride_s + h * f.q_stride_h,
                     f.q_stride_s, BQ, valid_q);
  load_tile_async<C>(sdO, static_cast<const u16*>(p.d_out) + seq.b * p.do_stride_b + row * p.do_stride_s + h * p.do_stride_h,
                     p.do_stride_s, BQ, valid_q);
  const u16* gK = static_cast<const u16*>(f.k) + seq.b * f.k_stride_b + seq.k_begin * f.k_stride_s + hk * f.k_stride_h;
  const u16* gV = static_cast<const u16*>(f.v) + seq.b * f.v_stride_b + seq.k_begin * f.v_stride_s + hk * f.v_stride_h;
  const MaskSpec m = variant_mask<C::kFlags>(f.mask);
  const auto walk = make_walk(m, seq, h, q0, reinterpret_cast<unsigned char*>(sV + 2 * BK * P));
  auto load_kv = [&](int tile, int stage) {
    const i64 k0 = i64(tile) * BK;
    const int valid_k = int(min_of<i64>(BK, seq.len_k - k0));
    load_tile_async<C>(sK + stage * BK * P, gK + k0 * f.k_stride_s, f.k_stride_s, BK, valid_k);
    load_tile_async<C>(sV + stage * BK * P, gV + k0 * f.v_stride_s, f.v_stride_s, BK, valid_k);
  };
  int tile = walk.first();
  if (!walk.done(tile)) load_kv(tile, 0);
  cp_async_commit();

  const TileContext<C> ctx = tile_context<C>(f, seq, h, q0, warp_row0, lane);
  float lse2[2], delta[2];
  bwd_row_stats(p, seq, h, q0 + warp_row0 + (lane >> 2), lse2, delta);
  const float cap_ln2 = C::kSoftcap ? kLn2 / f.softcap : 0.f;
  float dq[C::kMTiles][C::kDTiles][4];
  bwd_zero<C>(dq);
  for (int n = 0; !walk.done(tile); ++n) {  // n: tiles done
    cp_async_wait<0>();
    __syncthreads();
    const int following = walk.next(tile);
    const int stage = int(walk.ordinal(tile, n) & 1);
    if (!walk.done(following)) load_kv(following, stage ^ 1);
    cp_async_commit();
    const i64 k0 = i64(tile) * BK;
    float s[C::kMTiles][C::kNTiles][4], dp[C::kMTiles][C::kNTiles][4];
    qk_tile<C>(s, sQ, sK + stage * BK * P, warp_row0, lane);
    qk_tile<C>(dp, sdO, sV + stage * BK * P, warp_row0, lane);
    bwd_logits<C>(s, f);
    if (tile_needs_mask<C>(m, q0, k0, seq.len_k)) mask_logits<C>(s, ctx, m, seq, k0, lane);
    if constexpr (C::kSegments)
      if (walk.mixed_segments(tile)) mask_segments<C>(s, ctx, seq, k0, lane);
    if constexpr (C::kFlags.dense_mask)
      if (walk.partial(tile)) mask_dense<C>(s, f, ctx, seq, h, k0, lane);
    if constexpr (C::kFlags.dropout) {
      // The dropout factors in place of the weights' fragment layout, then the gradient with them.
      float z[C::kMTiles][C::kNTiles][4];
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) z[0][nt][i] = 1.f;
      drop_query_rows(z, flash_dropout(p), seq.index, h, q0 + warp_row0, k0, lane);
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          bwd_grad_dropped(s[0][nt][i], dp[0][nt][i], lse2[i / 2], delta[i / 2], cap_ln2, z[0][nt][i]);
    } else {
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) bwd_grad(s[0][nt][i], dp[0][nt][i], lse2[i / 2], delta[i / 2], cap_ln2);
    }
    pv_tile<C>(dq, dp, sK + stage * BK * P, lane);  // dQ += dS K
    tile = following;
  }
  cp_async_wait<0>();
  bwd_store_tile<C>(dq, f.scale, sQ,
                    static_cast<u16*>(p.dq) + seq.b * p.dq_stride_b + row * p.dq_stride_s + h * p.dq_stride_h,
                    p.dq_stride_s, valid_q, warp_row0, lane);
}

template <class Cfg> __device__ void bwd_q_tc(const FlashBwdParams& p) {
  using C = BwdQConfig<Cfg>;
  if constexpr (Cfg::kFlags.dense_mask) {
    bwd_q_tc_walk<Cfg>(p, [&](const MaskSpec& m, const SeqSpan& seq, i64 h, i64 q0, unsigned char*) {
      return dense_key_walk<C>(p.fwd, m, seq, h, q0);
    });
  } else {
    bwd_q_tc_walk<Cfg>(p, [](const MaskSpec& m, const SeqSpan& seq, i64, i64 q0, unsigned char*) {
      return KeyTileRange{key_range<C>(m, q0, seq.len_k)};
    });
  }
}

}  // namespace ejk::cuda
