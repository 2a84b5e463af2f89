// What the host's launch of the CUDA flash attention backward shares with its kernels
// (flash_bwd.cuh, flash_bwd_tc.cuh): which path a variant takes, the launches of the
// tensor-core path, their threads and shared memory.
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
