// Launch geometry of the CUDA flash forward families. No device code: the host runtime
// (compiled by g++) and the kernels (nvcc/NVRTC) include the same constants, so the grid, the
// block and the shared-memory size the runtime launches with cannot drift from the kernel.
#pragma once
#include "ejk/kernels/common/flash_params.h"

namespace ejk::cuda {

// Opt-in shared memory per block: sm_80 163 KiB, sm_90 227 KiB. The runtime re-checks
// against the device it runs on.
constexpr i64 kMaxSmemSm80 = 163 * 1024;
constexpr i64 kMaxSmemSm90 = 227 * 1024;

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
  // block_k <= 64: 240-250 registers, +8% on H200); one tile elsewhere (bench/cuda/NOTES.md).
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

// sm_90a family (wgmma, warp-specialized): one producer warpgroup (cp.async into a 2-4 stage
// K/V ring, completion on mbarriers) and block_q / 64 (1-3) consumer warpgroups, each owning
// 64 query rows: S = Q K^T with both operands in shared memory, O += P V with P from
// registers. Tiles are stored 128-byte swizzled (no padding): [head_dim / 64 column
// blocks][rows][64 elements]; the O tile is staged in the Q tile's space. The mbarriers sit
// after the V ring.
struct FlashFwdSm90Geometry {
  i64 head_dim, block_q, block_k;
  i64 stages_override = 0;  // 0: the default below (what keys build)

  static constexpr i64 kMaxStages = 4;
  static constexpr i64 kElemBytes = 2;
  static constexpr i64 kAlignSlack = 1024;  // dynamic smem is aligned up to a swizzle atom
  static constexpr i64 kBarrierBytes = 8 * (1 + 4 * kMaxStages);  // Q + full/empty x K/V

  constexpr i64 consumer_warpgroups() const { return block_q / 64; }
  constexpr i64 warps() const { return 4 * (consumer_warpgroups() + 1); }
  constexpr i64 threads() const { return 32 * warps(); }
  constexpr i64 q_tile_bytes() const { return kElemBytes * block_q * head_dim; }
  constexpr i64 kv_tile_bytes() const { return kElemBytes * block_k * head_dim; }
  constexpr i64 smem_bytes_for(i64 stages) const {
    return kAlignSlack + q_tile_bytes() + stages * 2 * kv_tile_bytes() + kBarrierBytes;
  }
  // K/V ring depth: as deep as shared memory allows, up to 4 (loads are a large share of a
  // tile's time: NOTES.md v5/v6); at least 2.
  constexpr i64 stages() const {
    if (stages_override != 0) return stages_override;
    for (i64 s = kMaxStages; s > 2; --s)
      if (smem_bytes_for(s) <= kMaxSmemSm90) return s;
    return 2;
  }
  constexpr i64 smem_bytes() const { return smem_bytes_for(stages()); }
  constexpr bool valid() const {
    // block_q 192 (three consumer warpgroups, FA3's head_dim-64 shape: 1.5x the K/V reuse per
    // loaded byte) only at head_dim 64, where 160 registers per consumer hold S, P and O.
    return head_dim % 64 == 0 && head_dim <= 256 &&
           (block_q == 64 || block_q == 128 || (block_q == 192 && head_dim == 64)) &&
           (block_k == 64 || block_k == 128) && stages() >= 2 && stages() <= kMaxStages &&
           smem_bytes() <= kMaxSmemSm90;
  }
  EJK_HD i64 grid_x(const FlashFwdParams& p) const { return ceil_div(p.seqlen_q, block_q); }
  EJK_HD i64 grid_y(const FlashFwdParams& p) const { return p.heads_q; }
  EJK_HD i64 grid_z(const FlashFwdParams& p) const { return p.batch; }
};

// Which family a key's kernel is: sm90a keys whose tile shape the wgmma family supports use it,
// every other key the sm80 family (mma.sync runs on sm_80 and newer).
constexpr bool flash_fwd_uses_wgmma(bool sm90a, i64 head_dim, i64 block_q, i64 block_k) {
  return sm90a && FlashFwdSm90Geometry{head_dim, block_q, block_k}.valid();
}

// Launch facts of a key, whichever family builds it.
struct FlashFwdLaunchFacts {
  bool wgmma;
  bool valid;       // false: no family can build this tile shape
  i64 threads;
  i64 smem_bytes;   // dynamic shared memory
};

constexpr FlashFwdLaunchFacts flash_fwd_launch_facts(bool sm90a, i64 head_dim, i64 block_q,
                                                     i64 block_k) {
  if (flash_fwd_uses_wgmma(sm90a, head_dim, block_q, block_k)) {
    const FlashFwdSm90Geometry g{head_dim, block_q, block_k};
    return {true, true, g.threads(), g.smem_bytes()};
  }
  const FlashFwdSm80Geometry g{head_dim, block_q, block_k};
  return {false, g.valid(), g.threads(), g.smem_bytes()};
}

}  // namespace ejk::cuda
