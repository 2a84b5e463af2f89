// Launch geometry of the CUDA flash forward families. No device code: the host runtime
// (compiled by g++) and the kernels (nvcc/NVRTC) include the same constants, so the grid, the
// block and the shared-memory size the runtime launches with cannot drift from the kernel.
#pragma once
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cuda/sm90/tma_desc.cuh"

namespace ejk::cuda {

// Opt-in shared memory per block: sm_80 163 KiB, sm_90 227 KiB. The runtime re-checks
// against the device it runs on.
constexpr i64 kMaxSmemSm80 = 163 * 1024;
constexpr i64 kMaxSmemSm90 = 227 * 1024;
constexpr i64 kElemBytesOf16Bit = 2;  // the CUDA kernels take bf16 / f16 tensors

// sm_80 family (mma.sync + ldmatrix + cp.async): each warp owns rows_per_warp query rows
// (one or two 16-row mma tiles), so block_q / rows_per_warp warps; K/V tiles of block_k keys
// stream through kStages buffers. Two tiles per warp halve the shared-memory reads of K/V per
// mma but double the accumulators: 255 registers and spills at head_dim 128, block_k 64.
struct FlashFwdSm80Geometry {
  i64 head_dim, block_q, block_k;
  i64 rows_per_warp_override = 0;  // 0: the default below (what the keys build)

  static constexpr i64 kStages = 2;
  static constexpr i64 kElemBytes = 2;

  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix land in distinct banks.
  constexpr i64 row_pitch() const { return head_dim + 8; }
  // Two tiles per warp where they fit in registers without spilling (head_dim <= 64 with
  // block_k <= 64: 240-250 registers, +8% on an H200); one tile elsewhere
  // (docs/design/flash_fwd_cuda.md, "The sm80 family").
  constexpr i64 rows_per_warp() const {
    if (rows_per_warp_override != 0) return rows_per_warp_override;
    return head_dim <= 64 && block_k <= 64 && block_q == 128 ? 32 : 16;
  }
  constexpr i64 warps() const { return block_q / rows_per_warp(); }
  constexpr i64 threads() const { return 32 * warps(); }
  constexpr i64 m_tiles_per_warp() const { return rows_per_warp() / 16; }
  constexpr i64 q_tile_elems() const { return block_q * row_pitch(); }
  constexpr i64 kv_tile_elems() const { return block_k * row_pitch(); }
  // Q tile (reused for the O tile in the epilogue) + kStages x (K tile, V tile).
  constexpr i64 smem_bytes() const {
    return kElemBytes * (q_tile_elems() + kStages * 2 * kv_tile_elems());
  }
  constexpr bool valid() const {
    return head_dim % 16 == 0 && head_dim >= 16 && head_dim <= 256 &&
           (block_q == 64 || block_q == 128) && block_k % 16 == 0 && block_k >= 16 &&
           (rows_per_warp() == 16 || rows_per_warp() == 32) && block_q % rows_per_warp() == 0 &&
           block_k <= 128 && smem_bytes() <= kMaxSmemSm90;
  }

  // One block per (q block, q head, sequence); q blocks run in reverse order in the kernel.
  EJK_HD i64 grid_x(const FlashFwdParams& p) const { return ceil_div(p.seqlen_q, block_q); }
  EJK_HD i64 grid_y(const FlashFwdParams& p) const { return p.heads_q; }
  EJK_HD i64 grid_z(const FlashFwdParams& p) const { return p.batch; }
};

// sm_90a family (wgmma, warp-specialized): one producer warpgroup, of which one thread issues
// TMA copies (cp.async.bulk.tensor) of Q and of K/V tiles into a 2-4 stage ring, completion on
// mbarriers, and block_q / 64 (1-3) consumer warpgroups, each owning 64 query rows: S = Q K^T
// with K from shared memory and Q from shared memory or registers (q_in_registers), O += P V
// with P from registers. Tiles are stored
// 128-byte swizzled (no padding): [head_dim / 64 column blocks][rows][64 elements], which is
// what one TMA box of {64 elements, rows} with SWIZZLE_128B writes. The mbarriers sit after the
// V ring. A head_dim that is no multiple of 64 (any multiple of 16, e.g. 32, 96 or 160) has
// tiles of the next multiple (tile_head_dim): the TMA fills the columns past the tensor's
// head_dim with zeros (below 64 its box is wider than the tensor), Q K^T skips their k steps,
// P V runs at N = head_dim (its B operand spans part of the last swizzle atom) and a TMA store
// drops the staged columns outside the map. One family for every head_dim a Hopper key asks
// for: the sm80 family ran d96 and d160 at 0.36-0.53x the rate of these tiles
// (docs/design/flash_fwd_cuda.md, "Head dims that are not multiples of 64").
//
// Work items are (q block, q head, sequence). One block per item, or (persistent) one block per
// SM looping over items, the producer loading the next item's Q and K/V while the consumers
// finish the last one (their output goes out through an O tile of its own, so the Q tile is
// free as soon as the last S = Q K^T is done).
enum class Sm90Schedule : int { by_default = 0, per_item = 1, persistent = 2 };
// Where S = Q K^T reads Q from: the Q tile in shared memory (wgmma with both operands in shared
// memory), or A fragments the consumers load into registers once per item (see q_in_registers).
enum class Sm90QOperand : int { by_default = 0, smem = 1, registers = 2 };

struct FlashFwdSm90Geometry {
  i64 head_dim, block_q, block_k;
  i64 stages_override = 0;  // 0: the default below (what keys build)
  Sm90Schedule schedule_override = Sm90Schedule::by_default;
  Sm90QOperand q_operand_override = Sm90QOperand::by_default;
  bool bias = false;  // the key reads a bias: staged through shared memory where that fits

  static constexpr i64 kMaxStages = 4;
  static constexpr i64 kElemBytes = 2;
  static constexpr i64 kAlignSlack = 1024;  // dynamic smem is aligned up to a swizzle atom
  // Q full/empty + full/empty x K/V per stage; after them the producer's record of the block's
  // current work item (flash_fwd_sm90.cuh, Sm90ItemRecord): its full barrier, 8 bytes of
  // padding and 16 bytes of record.
  static constexpr i64 kBarrierBytes = 8 * (2 + 4 * kMaxStages);
  static constexpr i64 kItemRecordBytes = 32;
  static constexpr i64 kTmaBoxCols = 64;  // one 128-byte swizzle row of 16-bit elements

  // Columns of the shared-memory tiles and of O's accumulators: head_dim up to whole
  // 128-byte swizzle rows (TMA boxes of kTmaBoxCols).
  constexpr i64 tile_head_dim() const { return ceil_div(head_dim, kTmaBoxCols) * kTmaBoxCols; }
  constexpr i64 consumer_warpgroups() const { return block_q / 64; }
  constexpr i64 warps() const { return 4 * (consumer_warpgroups() + 1); }
  constexpr i64 threads() const { return 32 * warps(); }
  constexpr i64 q_tile_bytes() const { return kElemBytes * block_q * tile_head_dim(); }
  constexpr i64 kv_tile_bytes() const { return kElemBytes * block_k * tile_head_dim(); }
  // Persistent blocks stage O apart from Q (the next item's Q streams into the Q tile while
  // the last item's O is read out by its TMA store), where that leaves room for two K/V stages;
  // elsewhere O goes through the Q tile (one block per item: Q is never reloaded) or, persistent
  // without room, straight from registers to global memory.
  constexpr i64 ring_smem_bytes_for(i64 stages) const {
    return kAlignSlack + q_tile_bytes() + stages * 2 * kv_tile_bytes() + kBarrierBytes +
           kItemRecordBytes;
  }
  constexpr bool o_tile_fits() const {
    return ring_smem_bytes_for(2) + q_tile_bytes() <= kMaxSmemSm90;
  }
  constexpr bool o_buffer() const { return persistent() && o_tile_fits(); }
  constexpr i64 o_tile_bytes() const { return o_buffer() ? q_tile_bytes() : 0; }
  constexpr i64 smem_bytes_for(i64 stages) const {
    return ring_smem_bytes_for(stages) + o_tile_bytes();
  }
  // K/V ring depth: as deep as shared memory allows, up to 4 (loads are a large share of a
  // tile's time: 3 stages 547 vs 2 stages 496 TFLOP/s at head_dim 128, 8k); at least 2.
  constexpr i64 stages() const {
    if (stages_override != 0) return stages_override;
    for (i64 s = kMaxStages; s > 2; --s)
      if (smem_bytes_for(s) <= kMaxSmemSm90) return s;
    return 2;
  }
  // A bias key's consumer warps stage each tile's bias of their 16 rows in shared memory one
  // tile ahead and read it from there: 4-byte global loads per pair of keys in the fragment
  // layout touched 8 rows' cache lines per load and left the bias kernels at 1.4 TB/s. One lane
  // of each warp copies them with the TMA (boxes of 64 keys x 16 rows, the 128-byte swizzle,
  // the warp's own mbarrier; sm90_stage_bias): per-lane cp.async chunks put ~100 instructions
  // of addressing per tile on the softmax's path (docs/design/flash_fwd_cuda.md, "Bias"). A warp's
  // rows are whole boxes (kBiasBoxBytes each, 1024-byte aligned): the region starts 1 KiB past
  // the barriers (themselves 1 KiB aligned: every tile is a multiple of 1 KiB), and the warps'
  // bias barriers sit in that gap. Only where it fits beside everything else, which it does not
  // change; elsewhere the kernels read the bias from global memory.
  static constexpr i64 kBiasBoxRows = 16;  // one consumer warp's rows
  static constexpr i64 kBiasBoxBytes = kBiasBoxRows * kTmaBoxCols * kElemBytes;
  static constexpr i64 kBiasRegionOffset = 1024;  // from the barriers
  static_assert(kBarrierBytes + kItemRecordBytes + 8 * 12 <= kBiasRegionOffset,
                "flash_fwd sm90: the bias barriers of 12 consumer warps fit before the region");
  constexpr i64 bias_boxes() const { return ceil_div(block_k, kTmaBoxCols); }
  // Bytes per row of a warp's staged tile: its boxes' 128-byte rows.
  constexpr i64 bias_row_bytes() const { return bias_boxes() * kTmaBoxCols * kElemBytes; }
  constexpr i64 bias_stage_bytes() const {
    return kBiasRegionOffset - kBarrierBytes - kItemRecordBytes + block_q * bias_row_bytes();
  }
  constexpr bool bias_staged() const {
    return bias && smem_bytes_for(stages()) + bias_stage_bytes() <= kMaxSmemSm90;
  }
  constexpr i64 smem_bytes() const {
    return smem_bytes_for(stages()) + (bias_staged() ? bias_stage_bytes() : 0);
  }
  // Persistent where a block fills an SM's shared memory anyway, head_dim <= 128, and an O
  // tile fits beside two K/V stages: the consumers then hand O to a TMA store and go on, the
  // producer already streaming the next item's Q and K/V, which beats a block per item (its
  // launch, first loads and epilogue are not hidden). One block per item elsewhere: at
  // head_dim 256 and at 128 x 176 / 128 x 192 (no room for the O tile; the heuristic's long-sequence tiles, where launches are
  // rare and the hardware's block order balances the causal work). Tuning runs may ask either
  // way (docs/design/flash_fwd_cuda.md, "Schedules").
  constexpr bool persistent() const {
    if (schedule_override != Sm90Schedule::by_default)
      return schedule_override == Sm90Schedule::persistent;
    return tile_head_dim() <= 128 && 2 * ring_smem_bytes_for(kMaxStages) > kMaxSmemSm90 &&
           o_tile_fits();
  }
  // Registers per consumer thread: setmaxnreg's split of the 64K-register file at one block
  // per SM (two consumers: 128 x 24 + 256 x 240; three: 128 x 24 + 384 x 160). One consumer
  // (no split) may use 255, but without setmaxnreg ptxas spilled from an estimate of 238 on
  // (d128.bq64.bk192: 4 B, d64.bq64.bk240: 12 B, bk256: 80 B; bk224 at 230: none), so 232.
  constexpr i64 consumer_reg_cap() const {
    return consumer_warpgroups() == 3 ? 160 : consumer_warpgroups() == 2 ? 240 : 232;
  }
  // What a consumer thread holds across the overlapped loop: S(t+1) (block_k / 2 floats), O
  // (head_dim / 2), P(t) packed to 16 bits (block_k / 4), plus ~30 for addresses, row state
  // and loop counters. An estimate: shapes over the cap would spill in the inner loop.
  static constexpr i64 kConsumerOverheadRegs = 30;
  constexpr i64 consumer_regs_estimate() const {
    return block_k / 2 + head_dim / 2 + block_k / 4 + kConsumerOverheadRegs;
  }
  // Q's A fragments in registers: head_dim / 16 k steps of 4 registers each (none for the
  // zero columns of a padded tile).
  constexpr i64 q_fragment_regs() const { return head_dim / 4; }
  // S = Q K^T with Q from registers wherever its fragments fit beside S, P and O with
  // kQRegsHeadroom to spare: an SS wgmma of m64 x n128 x k16 reads 2 KiB of Q and 4 KiB of K
  // from shared memory per 64 tensor cycles (96 B/clk of the SM's 128, before the K/V copies
  // land there); from registers only the 4 KiB of K. Q is loaded once per item and its tile
  // released once S(0) has used the fragments. At 128 x 144 the estimate left 6 registers and
  // the gain turned mixed, hence the headroom (docs/design/flash_fwd_cuda.md, "Q in registers").
  static constexpr i64 kQRegsHeadroom = 16;
  constexpr bool q_in_registers() const {
    if (q_operand_override != Sm90QOperand::by_default)
      return q_operand_override == Sm90QOperand::registers;
    return consumer_regs_estimate() + q_fragment_regs() + kQRegsHeadroom <= consumer_reg_cap();
  }
  constexpr bool valid() const {
    // head_dim: a multiple of 16 (Q K^T's k steps) up to 256.
    // block_q 192 (three consumer warpgroups, FA3's head_dim-64 shape: 1.5x the K/V reuse per
    // loaded byte) only at head_dim <= 64 (tiles of 64 columns), where 160 registers per
    // consumer hold S, P and O.
    // block_k: any multiple of 16 in [64, 256] (the N of S = Q K^T's wgmma and a TMA box of
    // at most 256 rows; 16 keys per P V k step) whose accumulators fit the register cap.
    return head_dim % 16 == 0 && head_dim >= 16 && head_dim <= 256 &&
           (block_q == 64 || block_q == 128 || (block_q == 192 && head_dim <= 64)) &&
           block_k % 16 == 0 && block_k >= 64 && block_k <= 256 &&
           consumer_regs_estimate() <= consumer_reg_cap() && stages() >= 2 &&
           stages() <= kMaxStages && smem_bytes() <= kMaxSmemSm90;
  }
  // Work items: (q block, q head, sequence), q blocks fastest so that neighbouring blocks
  // share K/V in L2 (flash_fwd_sm90.cuh decodes an item the same way).
  i64 q_blocks(const FlashFwdParams& p) const { return ceil_div(p.seqlen_q, block_q); }
  i64 work_items(const FlashFwdParams& p) const {
    return q_blocks(p) * p.heads_q * p.batch;
  }
  // Blocks of the 1-D grid: one per item (the kernel decodes blockIdx.x as the item, so heads
  // and sequences are not bound by the 65535 of gridDim.y / z), or persistent: one per SM, at
  // most one per item. Either way at most 2^31 - 1 items (the runtime refuses more).
  i64 blocks(const FlashFwdParams& p, i64 sm_count) const {
    return persistent() ? min_of(work_items(p), sm_count) : work_items(p);
  }
};

// Second kernel argument of every flash forward kernel (one signature for both families; the
// sm80 family ignores it and gets zeros).
struct FlashFwdTensorMaps {
  TmaDescriptor q, k, v, o;
  TmaDescriptor bias;  // keys that stage their bias (FlashFwdSm90Geometry::bias_staged); else zeros
};

// The host encodes q / k / v as TmaTensorViews (sm90/tma_desc.cuh, flash_fwd_tma_view): 4-D
// (head_dim, rows, heads, batch) with the user's strides, boxes of {64 columns, tile rows}.
// Dense: rows are the sequence (the TMA zero-fills past its end). Varlen: rows are the packed
// tokens and batch is 1; rows past a sequence's end read the next sequence's (finite) values,
// which the mask turns into P = 0 exactly, so they contribute nothing (kernel: tile_needs_mask,
// k < len_k).

// O is stored through its map (64-row boxes: one consumer warpgroup's rows); dense rows past
// the sequence are outside the map and not written, varlen tails are stored without it. The
// bias has a map only for the keys that stage it (flash_fwd_tensors).
enum class FlashTensor : int { q = 0, k = 1, v = 2, o = 3, bias = 4 };
inline constexpr const char* flash_tensor_name(FlashTensor t) {
  return t == FlashTensor::q   ? "q"
         : t == FlashTensor::k ? "k"
         : t == FlashTensor::v ? "v"
         : t == FlashTensor::o ? "out"
                               : "bias";
}
inline TmaDescriptor& tensor_map(FlashFwdTensorMaps& maps, FlashTensor t) {
  return t == FlashTensor::q   ? maps.q
         : t == FlashTensor::k ? maps.k
         : t == FlashTensor::v ? maps.v
         : t == FlashTensor::o ? maps.o
                               : maps.bias;
}

// A view of 16-bit elements: dims innermost first, the element strides of axes 1..3, boxes of
// kTmaBoxCols columns x box_rows.
inline TmaTensorView tma_view_16bit(const void* base, const i64 (&dims)[4], const i64 (&strides)[3],
                                    i64 box_rows) {
  TmaTensorView v{};
  v.base = base;
  for (int i = 0; i < 4; ++i) v.dims[i] = u64(dims[i]);
  for (int i = 0; i < 3; ++i) v.strides[i] = u64(strides[i] * kElemBytesOf16Bit);
  v.box[0] = u32(FlashFwdSm90Geometry::kTmaBoxCols);
  v.box[1] = u32(box_rows);
  v.box[2] = 1;
  v.box[3] = 1;
  return v;
}

// The tensors a launch of a wgmma key encodes maps for: q, k, v, out, and the bias where the
// key stages one (FlashFwdLaunchFacts::bias_chunks) and the launch passes it.
struct FlashTensorList {
  FlashTensor items[5];
  int size;
  constexpr const FlashTensor* begin() const { return items; }
  constexpr const FlashTensor* end() const { return items + size; }
};
inline FlashTensorList flash_fwd_tensors(const FlashFwdParams& p, bool bias_staged) {
  const bool bias = bias_staged && p.bias != nullptr;
  return {{FlashTensor::q, FlashTensor::k, FlashTensor::v, FlashTensor::o, FlashTensor::bias},
          bias ? 5 : 4};
}

// The staged bias [B|1, Hq|1, Sq|1, Sk] as the kernels index it (varlen: by sequence, with the
// longest one's rows and keys), in boxes of 64 keys x one consumer warp's 16 rows. A broadcast
// axis (stride 0) has size 1 in the map and the kernels ask for coordinate 0 there; a bias
// broadcast over its rows comes in 1-row boxes. Keys and rows past the tensor arrive as zeros.
inline TmaTensorView flash_fwd_bias_view(const FlashFwdParams& p) {
  const bool rows_bcast = p.bias_stride_q == 0;
  const FlashFwdBiasExtent e = flash_fwd_bias_extent(p);
  // A stride of a size-1 axis is never followed: 8 elements (16 bytes, the smallest legal
  // stride) stand in for the 0 of a broadcast one.
  auto legal = [](i64 stride, i64 size) { return size == 1 ? i64(8) : stride; };
  return tma_view_16bit(p.bias, {p.seqlen_k, e.rows, e.heads, e.batches},
                        {legal(p.bias_stride_q, e.rows), legal(p.bias_stride_h, e.heads),
                         legal(p.bias_stride_b, e.batches)},
                        rows_bcast ? 1 : FlashFwdSm90Geometry::kBiasBoxRows);
}

inline TmaTensorView flash_fwd_tma_view(const FlashFwdParams& p, FlashTensor which,
                                        const FlashFwdSm90Geometry& g) {
  if (which == FlashTensor::bias) return flash_fwd_bias_view(p);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const bool q_rows = which == FlashTensor::q || which == FlashTensor::o;
  const i64 rows = varlen ? (q_rows ? p.total_q : p.total_k) : (q_rows ? p.seqlen_q : p.seqlen_k);
  const i64 heads = q_rows ? p.heads_q : p.heads_kv;
  const i64 batch = varlen ? 1 : p.batch;
  struct Strides { const void* base; i64 b, s, h; };
  const Strides st = which == FlashTensor::q   ? Strides{p.q, p.q_stride_b, p.q_stride_s, p.q_stride_h}
                     : which == FlashTensor::k ? Strides{p.k, p.k_stride_b, p.k_stride_s, p.k_stride_h}
                     : which == FlashTensor::v ? Strides{p.v, p.v_stride_b, p.v_stride_s, p.v_stride_h}
                                               : Strides{p.out, p.o_stride_b, p.o_stride_s, p.o_stride_h};
  // A stride of a size-1 axis is never followed: any legal value (one row) stands in for the
  // 0 or unused value the caller may pass there.
  auto legal = [&](i64 stride, i64 size) { return size == 1 ? st.s : stride; };
  return tma_view_16bit(st.base, {p.head_dim, rows, heads, batch},
                        {st.s, legal(st.h, heads), legal(st.b, batch)},
                        which == FlashTensor::q ? g.block_q : which == FlashTensor::o ? 64 : g.block_k);
}

// The schedule a key asks for: its `.items` flag, else the geometry's rule.
constexpr Sm90Schedule flash_fwd_schedule(bool per_item) {
  return per_item ? Sm90Schedule::per_item : Sm90Schedule::by_default;
}

// Which family a key's kernel is: sm90a keys whose tile shape the wgmma family supports use it,
// every other key the sm80 family (mma.sync runs on sm_80 and newer).
constexpr bool flash_fwd_uses_wgmma(bool sm90a, i64 head_dim, i64 block_q, i64 block_k) {
  return sm90a && FlashFwdSm90Geometry{head_dim, block_q, block_k}.valid();
}

// Launch facts of a key, whichever family builds it.
struct FlashFwdLaunchFacts {
  bool wgmma;       // the sm90a family: TMA tensor maps, maybe a persistent grid
  bool valid;       // false: no family can build this tile shape
  i64 threads;
  i64 smem_bytes;   // dynamic shared memory
  bool bias_chunks;  // the kernel stages its bias by TMA: 16-byte aligned rows (FlashFwdParams::bias)
};

constexpr FlashFwdLaunchFacts flash_fwd_launch_facts(bool sm90a, i64 head_dim, i64 block_q,
                                                     i64 block_k, bool per_item = false,
                                                     bool bias = false) {
  if (flash_fwd_uses_wgmma(sm90a, head_dim, block_q, block_k)) {
    const FlashFwdSm90Geometry g{head_dim, block_q, block_k, 0, flash_fwd_schedule(per_item),
                                 Sm90QOperand::by_default, bias};
    return {true, true, g.threads(), g.smem_bytes(), g.bias_staged()};
  }
  const FlashFwdSm80Geometry g{head_dim, block_q, block_k};
  return {false, g.valid(), g.threads(), g.smem_bytes(), false};
}

}  // namespace ejk::cuda
