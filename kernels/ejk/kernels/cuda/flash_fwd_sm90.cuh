// Flash attention forward, sm_90a family: wgmma (warpgroup MMA) for both products, warp
// specialized (FA3 style).
//
// Warpgroup 0 is the producer: it streams Q once and K/V tiles through a 2-4 stage ring with
// cp.async, each copy batch completing on an mbarrier (full), and refills a slot once the
// consumers release it (empty; K and V separately, since S(t) frees K(t) long before P V frees
// V(t)). Warpgroups 1.. are consumers of 64 query rows each; the producer hands its registers
// to them (setmaxnreg). Each consumer warp owns 16 rows, so the accumulators have the same
// per-warp fragment layout as the sm80 family's mma.sync C fragments and the mask / online
// softmax code of flash_fwd_tile.cuh is shared unchanged. In a consumer, P(t-1) V(t-1) runs on
// the tensor cores behind S(t) while the softmax of S(t) runs; with two consumers the GEMM
// issues alternate between them (ping-pong, named barriers), so one's softmax overlaps the
// other's GEMMs. Semantics: mask.h, as everywhere.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"
#include "ejk/kernels/cuda/wgmma.cuh"

namespace ejk::cuda {

// kPingPongOpt: alternate the two consumer warpgroups' GEMM issues (only with block_q 128).
// kStagesOpt: K/V ring depth, 0 for the geometry's default (tuning runs only).
template <Elem E, int D, int Br, int Bc, FlashFlags F, bool kPingPongOpt = true, int kStagesOpt = 0>
struct FlashFwdSm90Config {
  static constexpr FlashFwdSm90Geometry kGeometry{D, Br, Bc, kStagesOpt};
  static_assert(E != Elem::f32, "flash_fwd sm90: the CUDA kernels take bf16 or f16 inputs");
  static_assert(kGeometry.valid(),
                "flash_fwd sm90: head_dim a multiple of 64 up to 256, block_q 64 or 128 (or 192 "
                "at head_dim 64), block_k 64 or 128, shared memory <= 227 KiB");
  static constexpr Elem kElem = E;
  static constexpr int kHeadDim = D, kBlockQ = Br, kBlockK = Bc;
  static constexpr int kThreads = int(kGeometry.threads());
  static constexpr int kConsumers = int(kGeometry.consumer_warpgroups());
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kStages = int(kGeometry.stages());
  static constexpr int kMTiles = 1;          // 16 rows per warp
  static constexpr int kNTiles = Bc / 8;     // 8-key tiles of S
  static constexpr int kDTiles = D / 8;      // 8-column tiles of O
  static constexpr int kQBytes = int(kGeometry.q_tile_bytes());
  static constexpr int kKVBytes = int(kGeometry.kv_tile_bytes());
  static constexpr bool kCausal = F.causal, kWindow = F.window, kSoftcap = F.softcap;
  static constexpr bool kSinks = F.sinks, kBias = F.bias;
  static constexpr bool kPingPong = kPingPongOpt && kConsumers == 2;
  // Register split of the 64K-register file at one block per SM (384 threads start at 168,
  // 512 at 128): the producer needs few, the consumers hold S, P and O (head_dim 256: O alone
  // is 128). 128 * 40 + 256 * 232, 128 * 24 + 256 * 240 and 128 * 32 + 384 * 160 fit in 65536.
  static constexpr bool kRegSplit = kConsumers >= 2;
  static constexpr int kProducerRegs = kConsumers == 3 ? 32 : D > 128 ? 24 : 40;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : D > 128 ? 240 : 232;
  // Plain logits (no bias, no softcap) stay raw dot products until the exponent, where
  // scale * log2(e) is folded into one FFMA per score (softmax_deferred).
  static constexpr bool kFoldScale = !F.bias && !F.softcap;
};

// Byte offset of 16-byte chunk c (along D) of row r in a swizzled tile of `rows` rows.
template <class C> __device__ __forceinline__ u32 sw128_offset(int r, int c, int rows) {
  return u32((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r & 7)) << 4));
}

// Producer copy of kRows rows (row r at src + r * stride) into a swizzled tile, by the 128
// producer threads; rows at or past `valid_rows` are zero-filled (no garbage enters the GEMMs).
// Thread tid always copies the same 16-byte column chunk of rows tid / chunks + j * kRowStep,
// so each copy is one add away from the previous one and the unrolled issue has no long
// dependency chain: a latency-bound issue loop here starved the tensor cores (NOTES.md v5).
template <class C, int kRows>
__device__ __forceinline__ void load_tile_sw128(u32 dst, const u16* src, i64 stride,
                                                int valid_rows, int tid) {
  constexpr int kChunksPerRow = C::kHeadDim / 8;
  if constexpr (128 % kChunksPerRow == 0) {
    constexpr int kRowStep = 128 / kChunksPerRow;
    const int r0 = tid / kChunksPerRow, c = tid % kChunksPerRow;
    const u16* g = src + r0 * stride + c * 8;
    const i64 g_step = kRowStep * stride;
#pragma unroll 4
    for (int j = 0; j < kRows / kRowStep; ++j) {
      const int r = r0 + j * kRowStep;
      const bool valid = r < valid_rows;
      cp_async_16(dst + sw128_offset<C>(r, c, kRows), valid ? g : src, valid);
      g += g_step;
    }
  } else {
#pragma unroll 1
    for (int i = tid; i < kRows * kChunksPerRow; i += 128) {
      const int r = i / kChunksPerRow, c = i % kChunksPerRow;
      const bool valid = r < valid_rows;
      cp_async_16(dst + sw128_offset<C>(r, c, kRows), valid ? src + r * stride + c * 8 : src,
                  valid);
    }
  }
}

// Pins accumulator registers after a wgmma wait: without it the compiler may read them
// before the wait (the asm that wrote them "finished" at issue as far as it knows).
template <int N> __device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Issues S = Q K^T for the warpgroup's 64 rows (zeroed first): D/16 wgmmas, both operands
// K-major in shared memory. The caller fences before and commits/waits after.
template <class C>
__device__ __forceinline__ void qk_issue(float (&s)[1][C::kNTiles][4], u32 sQ_wg, u32 sK) {
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; ++kk) {
    // k step kk: column block kk / 4, 32 bytes per 16 elements inside the 128-byte row.
    const u64 a = smem_desc_sw128(sQ_wg + (kk / 4) * C::kBlockQ * 128 + (kk % 4) * 32, 16, 1024);
    const u64 b = smem_desc_sw128(sK + (kk / 4) * C::kBlockK * 128 + (kk % 4) * 32, 16, 1024);
    wgmma_ss<C::kBlockK, C::kElem>(&s[0][0][0], a, b);
  }
}

template <int N> __device__ __forceinline__ void zero(float (&x)[1][N][4]) {
#pragma unroll
  for (int t = 0; t < N; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) x[0][t][i] = 0.f;
}

// P (probabilities in S fragments) packed to the 16-bit A fragments of the P V wgmmas.
template <class C>
__device__ __forceinline__ void pack_p(u32 (&a)[C::kBlockK / 16][4], const float (&s)[1][C::kNTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < C::kBlockK / 16; ++kk) {
    a[kk][0] = pack2<C::kElem>(s[0][2 * kk][0], s[0][2 * kk][1]);
    a[kk][1] = pack2<C::kElem>(s[0][2 * kk][2], s[0][2 * kk][3]);
    a[kk][2] = pack2<C::kElem>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    a[kk][3] = pack2<C::kElem>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// Issues O += P V: P from registers (packed before the caller's fence: registers a wgmma
// reads must not be written between the fence and the wgmma), V MN-major in shared memory.
template <class C>
__device__ __forceinline__ void pv_issue(float (&o)[1][C::kDTiles][4],
                                         const u32 (&a)[C::kBlockK / 16][4], u32 sV) {
#pragma unroll
  for (int kk = 0; kk < C::kBlockK / 16; ++kk) {
    // keys 16kk..16kk+15 = two 8-row groups (SBO 1024 B); 64-column blocks LBO apart.
    const u64 b = smem_desc_sw128(sV + kk * 16 * 128, C::kBlockK * 128, 1024);
    wgmma_rs_tb<C::kHeadDim, C::kElem>(&o[0][0][0], a[kk], b);
  }
}

// Online softmax of a new S tile without touching O: returns each row's rescale factor, which
// the caller applies to O once the P V wgmma still accumulating into it has finished.
// s holds x / exp_scale for log2 logits x (exp_scale > 0: raw dot products with the scale
// folded in, or 1): the max is taken on s and scaled once per row, and each score costs one
// FFMA and one ex2. Masked entries are -inf either way.
template <class C>
__device__ __forceinline__ void softmax_deferred(float (&s)[1][C::kNTiles][4],
                                                 RowState (&rows)[1][2], float (&alpha)[2],
                                                 float exp_scale) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float mx = neg_inf_f32();
#pragma unroll
    for (int nt = 0; nt < C::kNTiles; ++nt)
      mx = max_of(mx, max_of(s[0][nt][2 * half], s[0][nt][2 * half + 1]));
    mx = quad_max(mx) * exp_scale;  // -inf stays -inf (exp_scale > 0)
    RowState& r = rows[0][half];
    const float m_new = max_of(r.m, mx);
    const float m_use = m_new == neg_inf_f32() ? 0.f : m_new;  // see online_softmax
    alpha[half] = fast_exp2(r.m - m_use);
    r.m = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float pj = fast_exp2(fmaf(s[0][nt][2 * half + j], exp_scale, -m_use));
        s[0][nt][2 * half + j] = pj;
        sum += pj;
      }
    r.l = r.l * alpha[half] + sum;
  }
}

// Above head_dim 128 it is skipped (exactly: the factors are 1) when no row of the warp raised
// its max in this tile, which is most tiles once rows have seen a few: 128 FMULs per thread
// saved at D=256 (+1-7%, runs 16-17). At D <= 128 the vote and branch cost more than the D / 2
// FMULs they save (-3% at D=64 and D=128, runs 16-17).
template <class C>
__device__ __forceinline__ void rescale_o(float (&o)[1][C::kDTiles][4], const float (&alpha)[2]) {
  if constexpr (C::kHeadDim > 128)
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int dt = 0; dt < C::kDTiles; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[0][dt][i] *= alpha[i / 2];
}

// Shared-memory addresses of a block: Q, the K and V rings, and the mbarriers.
template <class C> struct Sm90Smem {
  u32 q, k, v, bars;
  __device__ __forceinline__ u32 k_tile(int stage) const { return k + stage * C::kKVBytes; }
  __device__ __forceinline__ u32 v_tile(int stage) const { return v + stage * C::kKVBytes; }
  __device__ __forceinline__ u32 q_full() const { return bars; }
  __device__ __forceinline__ u32 k_full(int st) const { return bars + 8 * (1 + st); }
  __device__ __forceinline__ u32 v_full(int st) const { return bars + 8 * (1 + C::kStages + st); }
  __device__ __forceinline__ u32 k_empty(int st) const {
    return bars + 8 * (1 + 2 * C::kStages + st);
  }
  __device__ __forceinline__ u32 v_empty(int st) const {
    return bars + 8 * (1 + 3 * C::kStages + st);
  }
};

// The block's problem: its sequence, head, q rows and key tiles (same for every warpgroup).
struct Sm90Block {
  SeqSpan seq;
  i64 h, hk, q0;
  int valid_q;
  MaskSpec mask;
  KeyRange keys;
  __device__ __forceinline__ int tiles() const { return keys.tile_end - keys.tile_begin; }
};

// Producer warpgroup: Q once, then K(t) and V(t) into slot t % kStages as soon as the
// consumers have released tile t - kStages from it. Every producer thread arrives (noinc)
// once per batch.
template <class C>
__device__ __forceinline__ void sm90_produce(const FlashFwdParams& p, const Sm90Smem<C>& sm,
                                             const Sm90Block& blk) {
  if constexpr (C::kRegSplit) setmaxnreg_dec<C::kProducerRegs>();
  const int tid = threadIdx.x;  // warpgroup 0
  const int tiles = blk.tiles();
  if (tiles == 0) return;  // the consumers wait for nothing
  const SeqSpan& seq = blk.seq;
  const u16* gQ = static_cast<const u16*>(p.q) + seq.b * p.q_stride_b +
                  (seq.q_begin + blk.q0) * p.q_stride_s + blk.h * p.q_stride_h;
  const u16* gK = static_cast<const u16*>(p.k) + seq.b * p.k_stride_b +
                  seq.k_begin * p.k_stride_s + blk.hk * p.k_stride_h;
  const u16* gV = static_cast<const u16*>(p.v) + seq.b * p.v_stride_b +
                  seq.k_begin * p.v_stride_s + blk.hk * p.v_stride_h;
  load_tile_sw128<C, C::kBlockQ>(sm.q, gQ, p.q_stride_s, blk.valid_q, tid);
  cp_async_arrive_noinc(sm.q_full());
  for (int t = 0; t < tiles; ++t) {
    const int st = t % C::kStages;
    const u32 released = ((t / C::kStages) + 1) & 1;  // parity of the release of t - kStages
    const i64 k0 = i64(blk.keys.tile_begin + t) * C::kBlockK;
    const int valid_k = int(min_of<i64>(C::kBlockK, seq.len_k - k0));
    if (t >= C::kStages) mbar_wait(sm.k_empty(st), released);
    load_tile_sw128<C, C::kBlockK>(sm.k_tile(st), gK + k0 * p.k_stride_s, p.k_stride_s, valid_k,
                                   tid);
    cp_async_arrive_noinc(sm.k_full(st));
    if (t >= C::kStages) mbar_wait(sm.v_empty(st), released);
    load_tile_sw128<C, C::kBlockK>(sm.v_tile(st), gV + k0 * p.v_stride_s, p.v_stride_s, valid_k,
                                   tid);
    cp_async_arrive_noinc(sm.v_full(st));
  }
  cp_async_wait_all();  // no copy outlives its thread
}

// Waits for a slot's copies, then publishes them to the async proxy the wgmmas read through.
__device__ __forceinline__ void sm90_acquire(u32 bar, u32 parity) {
  mbar_wait(bar, parity);
  fence_proxy_async_smem();
}
// One arrival per consumer warp (the empty barriers count warps) once its wgmmas are done.
__device__ __forceinline__ void sm90_release(u32 bar, int lane) {
  if (lane == 0) mbar_arrive(bar);
}

// Writes one consumer warpgroup's 64 finished rows: fragments -> its own rows of the Q tile
// (same swizzle: the 4-byte writes of a warp hit 32 distinct banks) -> 16-byte global stores.
template <class C>
__device__ __forceinline__ void sm90_store_o(const float (&o)[1][C::kDTiles][4],
                                             const RowState (&rows)[1][2], unsigned char* sQ,
                                             u16* gO, i64 o_stride_s, int valid_q, int cwg,
                                             int warp_row0, int lane) {
  const u32 bar = 3 + cwg;
  named_bar_sync(bar, 128);  // every wgmma of the warpgroup (reading its Q rows) is done
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp_row0 + (lane >> 2) + half * 8;  // row in the block
    const float inv = rows[0][half].out_scale;
#pragma unroll
    for (int dt = 0; dt < C::kDTiles; ++dt) {
      const u32 off = sw128_offset<C>(r, dt, C::kBlockQ) + (lane & 3) * 4;
      *reinterpret_cast<u32*>(sQ + off) =
          pack2<C::kElem>(o[0][dt][2 * half] * inv, o[0][dt][2 * half + 1] * inv);
    }
  }
  named_bar_sync(bar, 128);
  constexpr int kChunksPerRow = C::kHeadDim / 8;
  const int tid = threadIdx.x & 127;
  for (int i = tid; i < 64 * kChunksPerRow; i += 128) {
    const int r = cwg * 64 + i / kChunksPerRow, c = i % kChunksPerRow;
    if (r < valid_q)
      *reinterpret_cast<uint4*>(gO + r * o_stride_s + c * 8) =
          *reinterpret_cast<const uint4*>(sQ + sw128_offset<C>(r, c, C::kBlockQ));
  }
}

// Consumer warpgroup cwg: rows 64 cwg .. 64 cwg + 63 of the block.
template <class C>
__device__ __forceinline__ void sm90_consume(const FlashFwdParams& p, const Sm90Smem<C>& sm,
                                             const Sm90Block& blk, unsigned char* sQ_ptr) {
  if constexpr (C::kRegSplit) setmaxnreg_inc<C::kConsumerRegs>();
  const int ctid = threadIdx.x - 128, lane = ctid & 31, warp = ctid >> 5;
  const int cwg = warp / 4, warp_row0 = warp * 16;
  const u32 sQ_wg = sm.q + cwg * 64 * 128;
  const SeqSpan& seq = blk.seq;
  TileContext<C> ctx = tile_context<C>(p, seq, blk.h, blk.q0, warp_row0, lane);
  // Folding needs scale > 0 (the max of raw scores is then the max of the logits, and a masked
  // -inf stays -inf); any other finite scale multiplies up front as the sm80 family does.
  const bool fold = C::kFoldScale && ctx.scale_log2 > 0.f;
  const float exp_scale = fold ? ctx.scale_log2 : 1.f;
  if (fold) ctx.scale_log2 = 1.f;  // masked tiles keep raw values, only the -inf goes in
  RowState rows[1][2];
  init_rows<C>(rows);
  float o[1][C::kDTiles][4];
  zero<C::kDTiles>(o);
  const int tiles = blk.tiles();
  float s[1][C::kNTiles][4];
  float alpha[2];
  u32 pa[C::kBlockK / 16][4];
  // Ping-pong: warpgroup g issues its GEMMs after syncing on barrier 1 + g, then lets the
  // other one go (arrive on 2 - g). Warpgroup 1 opens the first turn for warpgroup 0 and skips
  // its last hand-over, so every arrival meets a sync.
  auto turn_begin = [&]() {
    if (C::kPingPong) named_bar_sync(1 + cwg, 256);
  };
  auto turn_end = [&](int t) {
    if (C::kPingPong && !(cwg == 1 && t == tiles - 1)) named_bar_arrive(2 - cwg, 256);
  };
  auto to_log2 = [&](int t) {
    const i64 k0 = i64(blk.keys.tile_begin + t) * C::kBlockK;
    if (tile_needs_mask<C>(blk.mask, ctx, blk.q0, k0, seq.len_k))
      logits_to_log2<C, true>(s, p, ctx, blk.mask, seq, k0, lane);
    else if (!fold)  // folded plain logits need nothing until the exponent
      logits_to_log2<C, false>(s, p, ctx, blk.mask, seq, k0, lane);
  };

  if (tiles > 0) {
    if (C::kPingPong && cwg == 1) named_bar_arrive(1, 256);
    sm90_acquire(sm.q_full(), 0);
    // Tile 0 alone: S(0), softmax, P(0).
    sm90_acquire(sm.k_full(0), 0);
    turn_begin();
    zero<C::kNTiles>(s);
    wgmma_fence();
    qk_issue<C>(s, sQ_wg, sm.k_tile(0));
    wgmma_commit();
    turn_end(0);
    wgmma_wait<0>();
    fence_operands<C::kNTiles * 4>(&s[0][0][0]);
    sm90_release(sm.k_empty(0), lane);
    logits_to_log2<C, true>(s, p, ctx, blk.mask, seq, i64(blk.keys.tile_begin) * C::kBlockK, lane);
    softmax_deferred<C>(s, rows, alpha, exp_scale);
    pack_p<C>(pa, s);
    // Steady state: S(t) on the tensor cores, then P(t-1) V(t-1) behind it; the softmax of
    // S(t) runs while P V still accumulates.
    for (int t = 1; t < tiles; ++t) {
      const int st = t % C::kStages, pst = (t - 1) % C::kStages;
      sm90_acquire(sm.k_full(st), (t / C::kStages) & 1);
      sm90_acquire(sm.v_full(pst), ((t - 1) / C::kStages) & 1);
      turn_begin();
      zero<C::kNTiles>(s);
      wgmma_fence();
      qk_issue<C>(s, sQ_wg, sm.k_tile(st));
      wgmma_commit();
      pv_issue<C>(o, pa, sm.v_tile(pst));
      wgmma_commit();
      turn_end(t);
      wgmma_wait<1>();  // S(t) done, P V may still run
      fence_operands<C::kNTiles * 4>(&s[0][0][0]);
      sm90_release(sm.k_empty(st), lane);
      to_log2(t);
      softmax_deferred<C>(s, rows, alpha, exp_scale);
      wgmma_wait<0>();
      fence_operands<C::kDTiles * 4>(&o[0][0][0]);
      sm90_release(sm.v_empty(pst), lane);
      rescale_o<C>(o, alpha);
      pack_p<C>(pa, s);
    }
    const int last = (tiles - 1) % C::kStages;
    sm90_acquire(sm.v_full(last), ((tiles - 1) / C::kStages) & 1);
    wgmma_fence();
    pv_issue<C>(o, pa, sm.v_tile(last));
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands<C::kDTiles * 4>(&o[0][0][0]);
  }

  finish_rows<C>(rows, p, blk.h);
  write_lse<C>(rows, p, seq, blk.h, blk.q0, warp_row0, lane);
  u16* gO = static_cast<u16*>(p.out) + seq.b * p.o_stride_b +
            (seq.q_begin + blk.q0) * p.o_stride_s + blk.h * p.o_stride_h;
  sm90_store_o<C>(o, rows, sQ_ptr, gO, p.o_stride_s, blk.valid_q, cwg, warp_row0, lane);
}

template <class C>
__device__ __forceinline__ void flash_fwd_sm90(const FlashFwdParams& p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];  // same declaration as sm80
  // Swizzle atoms must be 1024-byte aligned; the geometry reserves the slack.
  const u32 raw_addr = smem_addr(smem_raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  Sm90Smem<C> sm;
  sm.q = base;
  sm.k = sm.q + C::kQBytes;
  sm.v = sm.k + C::kStages * C::kKVBytes;
  sm.bars = sm.v + C::kStages * C::kKVBytes;

  Sm90Block blk;
  blk.seq = sequence_span(p, blockIdx.z);
  const int q_block = gridDim.x - 1 - blockIdx.x;  // heaviest (causal) blocks first
  blk.q0 = i64(q_block) * C::kBlockQ;
  if (blk.q0 >= blk.seq.len_q) return;  // whole block: before any barrier
  blk.h = blockIdx.y;
  blk.hk = blk.h / (p.heads_q / p.heads_kv);
  blk.valid_q = int(min_of<i64>(C::kBlockQ, blk.seq.len_q - blk.q0));
  blk.mask = variant_mask<C>(p);
  blk.keys = key_range<C>(blk.mask, blk.q0, blk.seq.len_k);

  if (threadIdx.x == 0) {
    mbar_init(sm.q_full(), 128);
    for (int st = 0; st < C::kStages; ++st) {
      mbar_init(sm.k_full(st), 128);  // every producer thread arrives
      mbar_init(sm.v_full(st), 128);
      mbar_init(sm.k_empty(st), 4 * C::kConsumers);  // every consumer warp arrives
      mbar_init(sm.v_empty(st), 4 * C::kConsumers);
    }
  }
  __syncthreads();
  if (threadIdx.x < 128)
    sm90_produce<C>(p, sm, blk);
  else
    sm90_consume<C>(p, sm, blk, smem_raw + (base - raw_addr));
}

}  // namespace ejk::cuda
