// Flash attention forward, sm_90a family: wgmma (warpgroup MMA) for both products, warp
// specialized (FA3 style).
//
// Warpgroup 0 is the producer: one of its threads issues TMA bulk tensor copies of Q and of the
// K/V tiles into a 2-4 stage ring, each completing on an mbarrier (full, with the expected byte
// count), and refills a slot once the consumers release it (empty; K and V separately, since
// S(t) frees K(t) long before P V frees V(t)). Warpgroups 1.. are consumers of 64 query rows
// each; the producer hands its registers to them (setmaxnreg). Each consumer warp owns 16 rows,
// so the accumulators have the same per-warp fragment layout as the sm80 family's mma.sync C
// fragments and the mask / online softmax code of flash_fwd_tile.cuh is shared unchanged. In a
// consumer, P(t-1) V(t-1) runs on the tensor cores behind S(t) while the softmax of S(t) runs;
// with two or three consumers they issue their GEMMs in turns (ping-pong, or a ring of three;
// named barriers), so one's softmax overlaps the others' GEMMs. Where its fragments fit, Q is
// loaded into registers once per item and S = Q K^T reads only K from shared memory
// (q_in_registers). Persistent blocks (flash_fwd_traits.cuh) loop over work items; the Q tile
// has its own empty barrier so the next item's Q streams in while the consumers finish the
// last one (at once, with Q in registers), and (kItemRecord) the producer hands the consumers
// each item's decoded coordinates through shared memory ahead of its Q (the shared-memory
// layout, the producer and these hand-offs: flash_fwd_sm90_pipeline.cuh; a consumer's GEMM
// issue, softmax and rescale per tile: flash_fwd_sm90_steps.cuh). O leaves through
// shared memory and TMA stores that the consumers do not wait for. Semantics: mask.h, as
// everywhere.
#pragma once
#include "ejk/kernels/cuda/flash_fwd_sm80.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90_pipeline.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90_probe.cuh"
#include "ejk/kernels/cuda/flash_fwd_sm90_steps.cuh"
#include "ejk/kernels/cuda/sm90/epilogue.cuh"
#include "ejk/kernels/cuda/sm90/pipeline.cuh"

namespace ejk::cuda {

// kPingPongOpt: the consumer warpgroups issue their GEMMs in turns (two: alternating; three:
// a ring, as FlashAttention-3 does at head_dim 64).
// kStagesOpt: K/V ring depth, 0 for the geometry's default; kScheduleOpt: one block per work
// item or persistent; kQOpt: Q from shared memory or registers for S = Q K^T; by_default for
// the geometry's rules (all three for tuning runs only).
template <Elem E, int D, int Br, int Bc, FlashFlags F, bool kPingPongOpt = true, int kStagesOpt = 0,
          Sm90Schedule kScheduleOpt = Sm90Schedule::by_default,
          Sm90QOperand kQOpt = Sm90QOperand::by_default>
struct FlashFwdSm90Config {
  static constexpr FlashFwdSm90Geometry kGeometry{D,     Br,    Bc, kStagesOpt, kScheduleOpt,
                                                  kQOpt, F.bias};
  static_assert(E != Elem::f32, "flash_fwd sm90: the CUDA kernels take bf16 or f16 inputs");
  static_assert(kGeometry.valid(),
                "flash_fwd sm90: head_dim a multiple of 16 in [16, 256], block_q 64 or 128 (or 192 "
                "at head_dim <= 64), block_k a multiple of 16 in [64, 256] whose S, P and O fit the "
                "consumer register cap, shared memory <= 227 KiB");
  static constexpr Elem kElem = E;
  // kHeadDim: the tiles' columns (head_dim up to a multiple of 64, kGeometry.tile_head_dim);
  // kDataDim: the tensors' head_dim, the columns that are loaded, multiplied and stored.
  static constexpr int kHeadDim = int(kGeometry.tile_head_dim()), kDataDim = D;
  static constexpr int kBlockQ = Br, kBlockK = Bc;
  static constexpr int kQkSteps = D / 16;  // k steps of S = Q K^T (none over zero columns)
  static constexpr int kThreads = int(kGeometry.threads());
  static constexpr int kConsumers = int(kGeometry.consumer_warpgroups());
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kStages = int(kGeometry.stages());
  static constexpr int kMTiles = 1;          // 16 rows per warp
  static constexpr int kNTiles = Bc / 8;     // 8-key tiles of S
  // 8-column tiles of O: the tensors' columns only (P V's N is head_dim, not the tile's).
  static constexpr int kDTiles = D / 8;
  static constexpr int kColBlocks = kHeadDim / 64;  // TMA boxes (128-byte swizzle rows) per tile
  static constexpr int kQBytes = int(kGeometry.q_tile_bytes());
  static constexpr bool kOBuffer = kGeometry.o_buffer();  // persistent: O staged apart from Q
  static constexpr int kOBytes = int(kGeometry.o_tile_bytes());
  static constexpr int kKVBytes = int(kGeometry.kv_tile_bytes());
  static constexpr FlashFlags kFlags = F;
  static constexpr bool kCausal = F.causal, kWindow = F.window, kSoftcap = F.softcap;
  static constexpr bool kSinks = F.sinks, kBias = F.bias, kSegments = F.segments;
  static constexpr bool kPingPong = kPingPongOpt && kConsumers >= 2;
  static constexpr bool kPersistent = kGeometry.persistent();
  // S = Q K^T takes Q as register A fragments, loaded once per item (kGeometry.q_in_registers).
  static constexpr bool kQInRegs = kGeometry.q_in_registers();
  static constexpr int kQFragSteps = kQInRegs ? kQkSteps : 1;  // k steps of 16 (1: unused)
  // Causal kernels without a window take items in L2-sized head groups, heaviest first
  // (sm90_causal_order): persistent blocks in a snake (sm90::Persistent) or drawn in that order
  // (kDrawItems); one block per item in the grid's order, which the hardware hands to the SMs
  // as they free up, as a draw does (docs/design/flash_fwd_cuda.md, "Schedules").
  static constexpr bool kCausalOrder = F.causal && !F.window;
  static constexpr bool kSnake = kPersistent && kCausalOrder;
  // Persistent blocks of one or two consumer warpgroups take each item from the producer's
  // record (Sm90ItemRecord) instead of decoding it themselves; three consumers only with the
  // causal order, for the drawn items below; not one block per item (one item, decoded while
  // its first Q is in flight either way). Measured: docs/design/flash_fwd_cuda.md, "Measured
  // choices of the sm90a kernels".
  static constexpr bool kItemRecord = kPersistent && (kConsumers <= 2 || kCausalOrder);
  // Those of them with the causal order draw each item from a counter of the launch
  // (FlashFwdParams::tile_counter, sm90::Drawn) instead of the snake: the block that finishes
  // first takes the next heaviest item, where the snake's block sums differ (same section).
  static constexpr bool kDrawItems = kSnake && kItemRecord;
  // Blocks that take their items as they free up need no padding of the order's groups.
  static constexpr bool kUnpaddedOrder = kCausalOrder && (kDrawItems || !kPersistent);
  // Register split of the 64K-register file at one block per SM (384 threads start at 168,
  // 512 at 128): the producer is one issuing thread and needs few, the consumers hold S, P and
  // O (head_dim 256: O alone is 128). 128 * 24 + 256 * 240 and 128 * 24 + 384 * 160 fit in 65536.
  static constexpr bool kRegSplit = kConsumers >= 2;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160 : 240;
  // Plain logits (no bias, no softcap) stay raw dot products until the exponent, where
  // scale * log2(e) is folded into one FFMA per score (softmax_deferred).
  static constexpr bool kFoldScale = !F.bias && !F.softcap;
  static constexpr bool kRollSinkLoops = true;  // for_each_sink
  // Each consumer warp has the bias of its rows copied into shared memory a tile ahead
  // (sm90_stage_bias) where that fits (kGeometry.bias_staged); the others read global memory.
  static constexpr bool kBiasStaged = kGeometry.bias_staged();
  static constexpr int kBiasRowBytes = int(kGeometry.bias_row_bytes());
  static constexpr int kBiasBoxes = int(kGeometry.bias_boxes());  // per tile and warp
  static_assert(!kBiasStaged || (kQBytes + kOBytes + 2 * kStages * kKVBytes) % 1024 == 0,
                "flash_fwd sm90: the barriers (and the staged bias boxes after them) 1 KiB aligned");
};

// Writes one consumer warpgroup's 64 finished rows through shared memory: fragments -> the
// warpgroup's rows of a staging tile (Q's swizzled layout: the 4-byte writes of a warp hit 32
// distinct banks) -> one TMA store per 64 columns, issued by the warpgroup's first thread and
// left running (the consumers go on at once; issuing the stores from registers cost 1.4-4k
// cycles per item; docs/design/flash_fwd_cuda.md, "Epilogue"). The staging tile is the O tile of
// persistent blocks, whose previous store must have read it, or the Q tile (one block per item:
// never reloaded). Varlen rows past the sequence belong to the next one, which the map cannot
// tell: a partial warpgroup there copies its rows out with 16-byte stores instead.
template <class C>
__device__ __forceinline__ void sm90_store_o_tma(const float (&o)[1][C::kDTiles][4],
                                                 const RowState (&rows)[1][2], const FlashFwdParams& p,
                                                 const FlashFwdTensorMaps& maps, const Sm90Block& blk,
                                                 u32 tile, unsigned char* tile_ptr, int cwg,
                                                 int warp_row0, int lane, Sm90PhaseProbe& probe) {
  const u32 bar = 1 + C::kConsumers + cwg;  // after the turn barriers (1 .. kConsumers)
  const bool leader = (threadIdx.x & 127) == 0;
  if (C::kOBuffer && leader) bulk_wait_read<0>();  // the last item's store has read the tile
  named_bar_sync(bar, 128);  // that, and (Q tile) every wgmma of the warpgroup is done with Q
  const float scale[2] = {rows[0][0].out_scale, rows[0][1].out_scale};
  sm90::stage_rows_sw128<C::kElem, C::kDTiles, C::kBlockQ>(tile_ptr, o[0], scale, warp_row0, lane);
  fence_proxy_async_smem();  // the TMA store (async proxy) reads what this thread wrote
  named_bar_sync(bar, 128);
  probe.mark(kProbeStage);
  const int row0 = cwg * 64, rows_here = blk.valid_q - row0;
  if (rows_here <= 0) return;
  const int q_row = int(blk.seq.q_begin + blk.q0) + row0;
  if (p.cu_seqlens_q == nullptr || rows_here >= 64) {
    if (leader)
      sm90::store_rows_tma<C::kColBlocks, C::kBlockQ>(&maps.o, tile, row0, q_row, int(blk.h),
                                                       int(blk.seq.b));
    return;
  }
  u16* gO = static_cast<u16*>(p.out) + blk.seq.b * p.o_stride_b + i64(q_row) * p.o_stride_s +
            blk.h * p.o_stride_h;
  constexpr int kChunksPerRow = C::kDataDim / 8;  // not the zero columns of a padded tile
#pragma unroll 1  // rare (a varlen sequence's last rows): code size, not speed
  for (int i = threadIdx.x & 127; i < rows_here * kChunksPerRow; i += 128) {
    const int r = i / kChunksPerRow, c = i % kChunksPerRow;
    *reinterpret_cast<uint4*>(gO + r * p.o_stride_s + c * 8) =
        *reinterpret_cast<const uint4*>(tile_ptr + sw128_offset<C>(row0 + r, c, C::kBlockQ));
  }
}

// Persistent blocks without room for an O tile: fragments straight to global memory (4 bytes
// per lane and 8-column tile; a quad writes 16 contiguous bytes of a row), so the Q tile is not
// needed for the epilogue and the next item's Q may already be landing in it.
template <class C>
__device__ __forceinline__ void sm90_store_o_direct(const float (&o)[1][C::kDTiles][4],
                                                    const RowState (&rows)[1][2], u16* gO,
                                                    i64 o_stride_s, int valid_q, int warp_row0,
                                                    int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp_row0 + (lane >> 2) + half * 8;  // row in the block
    if (r >= valid_q) continue;
    u16* row = gO + r * o_stride_s + (lane & 3) * 2;
    const float inv = rows[0][half].out_scale;
#pragma unroll
    for (int dt = 0; dt < C::kDTiles; ++dt)
      *reinterpret_cast<u32*>(row + dt * 8) =
          pack2<C::kElem>(o[0][dt][2 * half] * inv, o[0][dt][2 * half + 1] * inv);
  }
}

// Running positions of a consumer in the producer's streams (same order, same counts).
struct Sm90Cursor {
  u32 kv = 0;       // K/V tiles consumed so far
  u32 q_loads = 0;  // Q tiles consumed so far
  u32 records = 0;  // item records read so far
  u32 bias = 0;     // C::kBiasStaged: bias tiles this warp has waited for (its barrier's phases)
};

// A K/V tile a consumer warpgroup takes no part in (the `kv`-th of the block's stream): waited
// for (a release ahead of the load would count toward the slot's previous use), its turn handed
// on in ring order, both halves released.
template <class C>
__device__ __forceinline__ void sm90_pass_tile(const Sm90Smem<C>& sm, u32 kv, int cwg, int lane) {
  const int st = int(kv % C::kStages);
  const u32 ph = (kv / C::kStages) & 1;
  sm.k.wait_full(st, ph);
  if (C::kPingPong) {
    named_bar_sync(1 + cwg, 256);
    named_bar_arrive(1 + (cwg + 1) % C::kConsumers, 256);
  }
  sm.k.release(st, lane);
  sm.v.wait_full(st, ph);
  sm.v.release(st, lane);
}

// An item for a consumer warpgroup whose 64 rows all lie past the block's valid rows (the last
// q block of a sequence whose length is no multiple of block_q: 1k rows in 192-row blocks end
// with 64): nothing to compute or store, only its part of the protocol, so that the
// warpgroups with rows run alone instead of beside two that compute padding: the Q tile is
// released once it has landed, and each of the item's tiles passed (sm90_pass_tile).
template <class C>
__device__ __forceinline__ void sm90_pass_item(const Sm90Smem<C>& sm, const Sm90Block& blk,
                                               Sm90Cursor& cur, int cwg, int lane) {
  const int tiles = blk.tiles();
  if (tiles == 0) {  // no Q and no tiles were loaded for it
    if (C::kItemRecord) sm.q.release(0, lane);  // lane 0 read the record
    return;
  }
  sm.q.wait_full(0, cur.q_loads & 1);
  sm.q.release(0, lane);
  for (int t = 0; t < tiles; ++t)
    sm90_pass_tile<C>(sm, cur.kv + t, cwg, lane);
  cur.kv += tiles;
  ++cur.q_loads;
}

// Which of the item's key tiles consumer warpgroup cwg computes: all of them, except that three
// causal consumers stop at the last tile their own 64 rows see; the block's later tiles, fully
// masked for them, they pass after the loop (one or two of the three computed a masked tile on
// every diagonal).
template <class C>
__device__ __forceinline__ int sm90_warpgroup_tiles(const Sm90Block& blk, int cwg) {
  const int tiles = blk.tiles();
  if constexpr (C::kConsumers == 3 && C::kCausal && !C::kWindow) {
    // The passed tiles come after this warpgroup's last P V, which holds its V slot until the
    // epilogue: fewer passed tiles than stages (the block's rows end <= 128 keys later), or the
    // producer could not refill that slot for them.
    static_assert(C::kStages > (128 + C::kBlockK - 1) / C::kBlockK,
                  "flash_fwd sm90: too few K/V stages for the causal tiles a warpgroup passes");
    const i64 last_key = min_of<i64>(
        last_visible_key(i64(blk.q0) + cwg * 64 + 63, blk.mask), i64(blk.seq.len_k) - 1);
    return min_of<int>(tiles, int(last_key / C::kBlockK) + 1 - blk.keys.begin);
  }
  return tiles;
}

// One work item of one consumer warpgroup (rows 64 cwg .. 64 cwg + 63 of its q block): the
// registers it keeps across the item's tiles and the steps that use them. Built and run by
// sm90_consume_item; every step is inlined into the one tile loop.
template <class C> struct Sm90ItemCompute {
  const FlashFwdParams& p;
  const FlashFwdTensorMaps& maps;
  const Sm90Smem<C>& sm;
  const Sm90Block& blk;
  Sm90Cursor& cur;
  Sm90PhaseProbe& probe;
  unsigned char* smem;  // generic pointer to sm.q.tiles
  int lane, warp, cwg, warp_row0;
  u32 sQ_wg;            // this warpgroup's 64 rows of the Q tile
  TileContext<C> ctx;
  // C::kBiasStaged: the warp's boxes of staged bias (16 rows), filled a tile ahead of their
  // use, and their barrier.
  u32 bias_rows, bias_bar;
  Sm90BiasSource bias_src;
  bool fold;            // scale folded into the exponent (softmax_deferred)
  float exp_scale;
  int tiles, tiles_w;   // the item's key tiles, and those this warpgroup computes
  u32 kv0;              // the item's first K/V tile in the block's stream (cur.kv at the start)
  RowState rows[1][2];
  float o[1][C::kDTiles][4];
  float s[1][C::kNTiles][4];
  float alpha[2];
  u32 pa[C::kBlockK / 16][4];
  u32 qf[C::kQFragSteps][4];  // kQInRegs: this warp's rows of Q as A fragments

  // The rest is set by set_up and the steps: not value-initialized (an aggregate's zeroed arrays
  // cost instructions the original locals never had).
  __device__ __forceinline__ Sm90ItemCompute(const FlashFwdParams& p_, const FlashFwdTensorMaps& maps_,
                                             const Sm90Smem<C>& sm_, const Sm90Block& blk_,
                                             Sm90Cursor& cur_, Sm90PhaseProbe& probe_,
                                             unsigned char* smem_, int lane_, int warp_, int cwg_,
                                             u32 sQ_wg_)
      : p(p_), maps(maps_), sm(sm_), blk(blk_), cur(cur_), probe(probe_), smem(smem_), lane(lane_),
        warp(warp_), cwg(cwg_), warp_row0(warp_ * 16), sQ_wg(sQ_wg_) {}

  // Row constants, the staged bias's source and the softmax's scale.
  __device__ __forceinline__ void set_up() {
    ctx = tile_context<C>(p, blk.seq, blk.h, blk.q0, warp_row0, lane);
    bias_rows = C::kBiasStaged ? sm.bias_rows() + warp * 16 * C::kBiasRowBytes : 0;
    bias_bar = C::kBiasStaged ? sm.bias_full(warp) : 0;
    bias_src = {};
    if constexpr (C::kBiasStaged) {
      bias_src = sm90_bias_source<C>(p, blk.seq, blk.h, i64(blk.q0) + warp_row0);
      const int r = p.bias_stride_q == 0 ? 0 : lane >> 2;  // broadcast rows: row 0 for all
      ctx.bias_smem = reinterpret_cast<const u32*>(smem + (bias_rows - sm.q.tiles)) +
                      r * int(FlashFwdSm90Geometry::kTmaBoxCols / 2) + (lane & 3);
      ctx.bias_half = p.bias_stride_q == 0 ? 0 : 8 * int(FlashFwdSm90Geometry::kTmaBoxCols / 2);
      ctx.bias_swizzle = r;
    }
    // Folding needs scale > 0 (the max of raw scores is then the max of the logits, and a masked
    // -inf stays -inf); any other finite scale multiplies up front as the sm80 family does.
    // Folded logits stay raw dot products (masked ones -inf) until the exponent; unfolded ones
    // leave logits_to_log2 in natural units, log2(e) going into the exponent.
    fold = C::kFoldScale && ctx.scale_log2 > 0.f;
    exp_scale = fold ? ctx.scale_log2 : kLog2e;
    init_rows<C>(rows);
    zero<C::kDTiles>(o);
    tiles = blk.tiles();
    tiles_w = sm90_warpgroup_tiles<C>(blk, cwg);
    kv0 = cur.kv;
  }

  // Turns: warpgroup g issues its GEMMs after syncing on barrier 1 + g, then lets the next one
  // go (arrive on 1 + (g + 1) % kConsumers). All take the same number of turns per item, so
  // the ring runs on across items (sm90_consume opens and closes it).
  __device__ __forceinline__ void turn_begin() const {
    if (C::kPingPong) named_bar_sync(1 + cwg, 256);
  }
  __device__ __forceinline__ void turn_end() const {
    if (C::kPingPong) named_bar_arrive(1 + (cwg + 1) % C::kConsumers, 256);
  }
  // Ring slot and phase parity of the item's tile t.
  __device__ __forceinline__ int slot(int t) const { return int((kv0 + t) % C::kStages); }
  __device__ __forceinline__ u32 phase(int t) const { return ((kv0 + t) / C::kStages) & 1; }

  // S(t) to logits: the transform (unless folded), the staged bias's next copies, the position
  // mask where the tile needs one, the segment mask.
  __device__ __forceinline__ void logits(int t) {
    const i64 k0 = i64(blk.keys.begin + t) * C::kBlockK;
    if constexpr (C::kBiasStaged) mbar_wait(bias_bar, cur.bias++ & 1);  // tile t's bias
    if (!fold) logits_to_log2<C, false>(s, p, ctx, blk.seq, k0, lane);  // folded: raw logits
    if constexpr (C::kBiasStaged) {
      __syncwarp();  // every lane has read tile t's bias before the copies of t + 1 overwrite it
      if (t + 1 < tiles_w)
        sm90_stage_bias<C>(maps, bias_src, bias_rows, bias_bar, k0 + C::kBlockK, lane);
    }
    if (tile_needs_mask<C>(blk.mask, blk.q0, k0, blk.seq.len_k))
      mask_logits<C>(s, ctx, blk.mask, blk.seq, k0, lane);
    if constexpr (C::kSegments) mask_segments<C>(s, ctx, blk.seq, k0, lane);
  }

  __device__ __forceinline__ void issue_s(u32 sK) {
    if constexpr (C::kQInRegs)
      qk_issue_rs<C>(s, qf, sK);
    else
      qk_issue<C>(s, sQ_wg, sK);
  }

  // Q landed (and, in registers, loaded), then S(0) alone: the only peeled issue (a peeled first
  // tile with its own masked logits and softmax doubled the kernel's code, and NVRTC's time).
  __device__ __forceinline__ void first_s() {
    if constexpr (C::kBiasStaged)  // tile 0's bias, while Q and K(0) are waited for
      if (tiles_w > 0)
        sm90_stage_bias<C>(maps, bias_src, bias_rows, bias_bar, i64(blk.keys.begin) * C::kBlockK,
                           lane);
    sm.q.wait_full(0, cur.q_loads & 1);
    // Q in registers: the tile goes back to the producer once S(0) has read the fragments
    // (step), and the next item's Q may land while this one runs.
    if constexpr (C::kQInRegs) load_q_fragments<C>(qf, sm.q.tiles, warp_row0, lane);
    probe.mark(kProbeQWait);
    sm.k.wait_full(slot(0), phase(0));
    probe.mark(kProbeKWait);
    turn_begin();
    probe.mark(kProbeTurn);
    zero<C::kNTiles>(s);
    wgmma_fence();
    issue_s(sm.k.tile(slot(0)));
    wgmma_commit();
    turn_end();
    wgmma_wait<0>();
    probe.mark(kProbeS0);
  }

  // Tile t: softmax of S(t) while P(t-1) V(t-1) still accumulates, then the issue of S(t+1)
  // followed by P(t) V(t).
  __device__ __forceinline__ void step(int t) {
    const int st = slot(t);
    fence_operands<C::kNTiles * 4>(&s[0][0][0]);  // S(t) is done
    sm.k.release(st, lane);
    // The Q tile goes back once the last S that reads it is done: S(0) with Q in registers (its
    // fragments), the item's last S otherwise. Not right after the ldmatrix loads of the
    // fragments: ptxas lets the arrive go without waiting for them, and a warp whose lane 0 had
    // just issued the O store's TMA copies read the next item's Q when its loads ran behind the
    // arrive (docs/design/flash_fwd_cuda.md, "Correctness traps found"). Beside the K release:
    // a branch of its own after the S(0) wait made ptxas serialize the wgmmas of the head_dim
    // 128 kernels (C7515).
    if (t == (C::kQInRegs ? 0 : tiles_w - 1)) sm.q.release(0, lane);
    logits(t);
    softmax_deferred<C>(s, rows, alpha, exp_scale);
    wgmma_wait<0>();  // P(t-1) V(t-1) (nothing pending at t = 0)
    fence_operands<C::kDTiles * 4>(&o[0][0][0]);
    if (t > 0) sm.v.release(slot(t - 1), lane);
    rescale_o<C>(o, alpha);  // t = 0: O is 0
    pack_p<C>(pa, s);
    sm.v.wait_full(st, phase(t));
    if (t + 1 < tiles_w) {
      sm.k.wait_full(slot(t + 1), phase(t + 1));
      turn_begin();
      zero<C::kNTiles>(s);
      wgmma_fence();  // also orders pack_p's writes of P before P V reads them
      issue_s(sm.k.tile(slot(t + 1)));
      wgmma_commit();
      pv_issue<C>(o, pa, sm.v.tile(st));
      wgmma_commit();
      turn_end();
      wgmma_wait<1>();  // S(t+1) done, P(t) V(t) may still run
    } else {
      wgmma_fence();
      pv_issue<C>(o, pa, sm.v.tile(st));
      wgmma_commit();
    }
  }

  // Every tile of the item: computed, or (past this warpgroup's rows) passed.
  __device__ __forceinline__ void run_tiles() {
    if (tiles == 0) {
      if (C::kItemRecord) sm.q.release(0, lane);  // lane 0 read the record
      return;
    }
    first_s();
    for (int t = 0; t < tiles_w; ++t) step(t);
    for (int t = tiles_w; t < tiles; ++t)  // the tiles none of this warpgroup's rows see
      sm90_pass_tile<C>(sm, kv0 + t, cwg, lane);
  }

  // The row sums are final once the last softmax is done: the normalisation and the lse run
  // while the last P V is still on the tensor cores; then the item's last V slot goes back.
  __device__ __forceinline__ void finish() {
    rows[0][0].top = quad_max(rows[0][0].top);  // lane maxima (softmax_deferred)
    rows[0][1].top = quad_max(rows[0][1].top);
    finish_rows<C>(rows, p, blk.h);
    write_lse<C>(rows, p, blk.seq, blk.h, blk.q0, warp_row0, lane);
    probe.mark(kProbeFinish);
    wgmma_wait<0>();  // the last P V (nothing pending without visible keys)
    fence_operands<C::kDTiles * 4>(&o[0][0][0]);
    if (tiles > 0) {
      sm.v.release(slot(tiles_w - 1), lane);
      cur.kv += tiles;
      ++cur.q_loads;
    }
  }

  // O out: straight from registers (persistent blocks without an O tile), else through shared
  // memory and TMA stores.
  __device__ __forceinline__ void store() {
    if constexpr (C::kPersistent && !C::kOBuffer) {
      u16* gO = static_cast<u16*>(p.out) + blk.seq.b * p.o_stride_b +
                (blk.seq.q_begin + blk.q0) * p.o_stride_s + blk.h * p.o_stride_h;
      sm90_store_o_direct<C>(o, rows, gO, p.o_stride_s, blk.valid_q, warp_row0, lane);
      probe.mark(kProbeStage);
    } else {
      const u32 tile = C::kOBuffer ? sm.o() : sm.q.tiles;
      sm90_store_o_tma<C>(o, rows, p, maps, blk, tile, smem + (tile - sm.q.tiles), cwg, warp_row0,
                          lane, probe);
    }
  }
};

// One work item of consumer warpgroup cwg: rows 64 cwg .. 64 cwg + 63 of its q block.
template <class C>
__device__ __forceinline__ void sm90_consume_item(const FlashFwdParams& p,
                                                  const FlashFwdTensorMaps& maps,
                                                  const Sm90Smem<C>& sm, const Sm90Block& blk,
                                                  Sm90Cursor& cur, unsigned char* smem) {
  Sm90PhaseProbe probe;
  probe.start();
  const int ctid = threadIdx.x - 128, lane = ctid & 31, warp = ctid >> 5;
  // The warpgroup index shuffled from lane 0: ptxas then knows it is warp-uniform and keeps what
  // derives from it in uniform registers: Q's wgmma descriptors (from threadIdx.x alone it put
  // an R2UR before each S = Q K^T wgmma of the kernels with Q in shared memory), the turn and
  // store barrier ids, the O store's rows (docs/design/flash_fwd_cuda.md, "Correctness traps
  // found"). At head_dim 256 only for Q's descriptors: its 16 k steps of S fill the uniform
  // registers, and the ids there pushed R2URs into the S + P V group. sQ_wg shuffles again for
  // that case (below 256 a no-op that ptxas keeps).
  const int cwg = C::kHeadDim < 256 ? __shfl_sync(0xffffffffu, warp / 4, 0) : warp / 4;
  // Three consumers only: the early return slowed the 128 x 128 kernels with Q in registers on
  // shapes where it never runs (docs/design/flash_fwd_cuda.md, "Measured choices").
  if constexpr (C::kConsumers == 3)
    if (cwg * 64 >= blk.valid_q) return sm90_pass_item<C>(sm, blk, cur, cwg, lane);
  Sm90ItemCompute<C> item(p, maps, sm, blk, cur, probe, smem, lane, warp, cwg,
                          sm.q.tiles + __shfl_sync(0xffffffffu, cwg, 0) * 64 * 128);
  item.set_up();
  item.run_tiles();
  probe.mark(kProbeLoop);
  item.finish();
  item.store();
  probe.mark(kProbeStore);
  if (item.tiles > 0) probe.commit(item.tiles);
}

// The consumers' hooks (sm90::consume_items): an item decoded and computed, and the block's end.
template <class C> struct Sm90Consumer {
  const FlashFwdParams& p;
  const FlashFwdTensorMaps& maps;
  const Sm90Smem<C>& sm;
  unsigned char* smem;
  Sm90Cursor cur;
  int cwg;

  __device__ __forceinline__ void compute(const Sm90Block& blk) {
    sm90_consume_item<C>(p, maps, sm, blk, cur, smem);
  }
  // Items the consumers decode themselves (without records; never a drawn order).
  __device__ __forceinline__ void compute(i64 item) {
    Sm90Block blk;
    if (sm90_block<C>(p, item, blk)) compute(blk);
  }
  // Warpgroup 0 takes the last warpgroup's last hand-over of the turn; shared memory must outlive
  // the O stores' reads of it, while their global writes complete on their own (waiting for
  // those too was measurably slower at head_dim 256).
  __device__ __forceinline__ void finish() {
    if (C::kPingPong && cwg == 0) named_bar_sync(1, 256);
    if ((threadIdx.x & 127) == 0) bulk_wait_read<0>();
  }
};

// Consumer warpgroups: every work item of the block, in the producer's order: from its records,
// or decoded from the block's static schedule.
template <class C>
__device__ __forceinline__ void sm90_consume(const FlashFwdParams& p,
                                             const FlashFwdTensorMaps& maps, const Sm90Smem<C>& sm,
                                             unsigned char* smem) {
  const int cwg = (threadIdx.x - 128) / 128;
  // The last warpgroup opens the first turn for warpgroup 0 (which closes it in finish), so
  // every arrival meets a sync.
  if (C::kPingPong && cwg == C::kConsumers - 1) named_bar_arrive(1, 256);
  Sm90Consumer<C> consumer{p, maps, sm, smem, Sm90Cursor{}, cwg};
  if constexpr (C::kItemRecord) {
    for (;; ++consumer.cur.records) {
      const Sm90ItemRecord rec = sm90_read_record<C>(sm, consumer.cur.records & 1);
      if (rec.z == kSm90EndOfWork) break;
      Sm90Block blk;
      sm90_block_from<C>(p, rec, blk);  // true: the producer passes only items of a sequence
      consumer.compute(blk);
    }
    consumer.finish();
  } else {
    sm90::consume_items(sm90_static_schedule<C>(sm90_total_items<C>(p)), consumer);
  }
}

// The kernel's roles for sm90::run_warp_specialized: the barriers, the producer, the consumers.
template <class C> struct Sm90Roles {
  const FlashFwdParams& p;
  const FlashFwdTensorMaps& maps;
  const Sm90Smem<C>& sm;
  unsigned char* smem;  // generic pointer to the aligned base (sm.q.tiles)
  __device__ __forceinline__ void init() { sm.init(); }
  __device__ __forceinline__ void produce() { sm90_produce<C>(p, maps, sm); }
  __device__ __forceinline__ void consume() { sm90_consume<C>(p, maps, sm, smem); }
};

template <class C>
__device__ __forceinline__ void flash_fwd_sm90(const FlashFwdParams& p,
                                               const FlashFwdTensorMaps& maps) {
#if defined(EJK_SM90_PROBE)
  const u64 probe_start = globaltimer_ns();
#endif
  extern __shared__ __align__(128) unsigned char smem_raw[];  // same declaration as sm80
  // Swizzle atoms (and TMA's 128-byte-swizzled boxes) must be 1024-byte aligned; the geometry
  // reserves the slack.
  const u32 raw_addr = smem_addr(smem_raw);
  const u32 base = (raw_addr + 1023u) & ~1023u;
  const Sm90Smem<C> sm(base);
  Sm90Roles<C> roles{p, maps, sm, smem_raw + (base - raw_addr)};
  sm90::run_warp_specialized<sm90::RegisterSplit{C::kRegSplit, C::kProducerRegs, C::kConsumerRegs}>(
      roles);
#if defined(EJK_SM90_PROBE)
  if (threadIdx.x == 128 && blockIdx.x < kProbeBlocks) {
    ejk_sm90_probe[3 * blockIdx.x] = probe_start;
    ejk_sm90_probe[3 * blockIdx.x + 1] = globaltimer_ns();
    ejk_sm90_probe[3 * blockIdx.x + 2] = sm_id();
  }
#endif
}

}  // namespace ejk::cuda
