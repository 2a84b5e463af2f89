// What the host's launch of the CUDA flash attention backward shares with its kernels
// (flash_bwd.cuh, flash_bwd_tc.cuh, flash_bwd_sm90.cuh): which path a variant takes, the launches
// of the tensor-core path, their threads and shared memory.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk::cuda {

// The scalar kernel's threads, which are also the keys and queries of its 32-wide tasks.
inline constexpr int kFlashBwdBlock = 32;
inline constexpr int kFlashBwdDeltaThreads = 128;  // one warp per query row

// FlashBwdParams::phase: which launch of the tensor-core path a block belongs to.
enum FlashBwdPhase : int { kBwdScalar = 0, kBwdDelta = 1, kBwdKv = 2, kBwdQ = 3, kBwdSinks = 4 };

// Bias variants (dbias sums) and head dims that are no multiple of 16 (the mma k step) run the
// scalar kernel; everything else the tensor-core kernels.
EJK_HD constexpr bool flash_bwd_tensor_cores(bool bias, long long head_dim) { return !bias && head_dim % 16 == 0; }

// Which tensor-core variants run the sm90a wgmma kernels (flash_bwd_sm90.cuh) instead: sm90a keys
// without bias, dropout or a dense mask, head_dim 64 or 128, block_q and block_k 64 or 128 (64-row
// warpgroups, whole 64-column swizzle boxes, accumulators within the register file).
EJK_HD constexpr bool flash_bwd_wgmma(bool sm90a, bool bias, bool dropout, bool dense_mask, long long head_dim,
                                      long long bq, long long bk) {
  return sm90a && !bias && !dropout && !dense_mask && (head_dim == 64 || head_dim == 128) &&
         (bq == 64 || bq == 128) && (bk == 64 || bk == 128);
}

// The dQ launch's queries per block and keys per tile: block_q and block_k, swapped on the wgmma
// path, whose dQ blocks then hold block_k rows as its dK/dV blocks do (each streamed tile shared
// by as many warpgroups: half the tile traffic at block_k 128 and block_q 64).
struct FlashBwdDqShape {
  long long rows, tile;
};
EJK_HD constexpr FlashBwdDqShape flash_bwd_dq_shape(bool wgmma, long long bq, long long bk) {
  return wgmma ? FlashBwdDqShape{bk, bq} : FlashBwdDqShape{bq, bk};
}

EJK_HD constexpr long long flash_bwd_pitch(long long head_dim) { return head_dim + 8; }
// dK/dV: K and V tiles resident, two stages of (Q, dO) tiles and of the tile's lse, delta and
// query segment ids.
EJK_HD constexpr long long flash_bwd_kv_smem(long long d, long long bq, long long bk) {
  return 2 * flash_bwd_pitch(d) * (2 * bk + 4 * bq) + 2 * 3 * 4 * bq;
}
// dQ: Q and dO tiles resident, two stages of (K, V) tiles.
EJK_HD constexpr long long flash_bwd_q_smem(long long d, long long bq, long long bk) {
  return 2 * flash_bwd_pitch(d) * (2 * bq + 4 * bk);
}
EJK_HD constexpr int flash_bwd_kv_threads(long long bk) { return int(bk / 16 * 32); }  // a warp per 16 keys
EJK_HD constexpr int flash_bwd_q_threads(long long bq) { return int(bq / 16 * 32); }   // a warp per 16 queries
EJK_HD constexpr int flash_bwd_max_threads(long long bq, long long bk) {
  const int a = flash_bwd_kv_threads(bk), b = flash_bwd_q_threads(bq);
  const int m = a > b ? a : b;
  return m > kFlashBwdDeltaThreads ? m : kFlashBwdDeltaThreads;
}

}  // namespace ejk::cuda
