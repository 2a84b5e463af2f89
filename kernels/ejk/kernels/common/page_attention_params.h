// page_attention (decode over a paged KV cache): the parameters every kernel takes, and the
// semantics the CPU and CUDA kernels and the float64 reference share.
//
// Sequence s has one query token per head, query [S, Hq, D]; its keys and values are its first
// n_s = min(context_lens[s], max_context_len, MB * BS) cache positions, position j at
// key_cache[block_tables[s, j / BS], g, j % BS, :] for kv head g = h / (Hq / Hkv). Per head:
//   x_j = scale * dot(q, k_j);  softcap: x_j = cap * tanh(x_j / cap)
//   visible: j < n_s, and with a window W: j >= n_s - W (the W newest positions)
//   out = sum_j softmax(x)_j v_j over the visible j; no visible position: out = 0.
// Masked positions are left out exactly (the seed's XLA fills -1e9 and so averages every page
// of a sequence with context_len 0; its other kernels give 0, which is what this op does).
//
// Split-KV (CUDA): the visible positions are cut into `splits` runs of `split_tokens`; each run
// writes its normalized partial out and log-sum-exp in f32, and the combine kernel merges them
// with merge_states_params.h's rule, n at a time.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

struct PageAttentionParams {
  const void* q;            // [S, Hq, D]
  const void* k_cache;      // [NB, Hkv, BS, D]
  const void* v_cache;      // [NB, Hkv, BS, D]
  const i32* context_lens;  // [S]
  const i32* block_tables;  // [S, MB]
  void* out;                // [S, Hq, D]
  i64 seqs, q_heads, kv_heads, head_dim, num_blocks, block_size, max_blocks;
  // Element strides (D is contiguous in every tensor).
  i64 q_ss, q_sh, o_ss, o_sh;
  i64 k_sb, k_sh, k_st, v_sb, v_sh, v_st;  // per block, kv head, slot
  i64 bt_ss;                               // block_tables between sequences
  float scale;
  float softcap;       // 0: none
  i64 window;          // 0: none
  i64 max_context;     // cap on every context length (max_context_len, else MB * BS)
  // CUDA split-KV: positions per split and how many (1: no split, the kernel writes out).
  i64 split_tokens, splits;
  float* part_out;  // [splits, S, Hq, D] f32 (splits > 1)
  float* part_lse;  // [splits, S, Hq] f32
  i32 vec;          // CUDA: 1 where every cache row and query can be read in 16-byte chunks
};

// The positions [begin, end) sequence s attends to: the clamped context, and the window.
struct PageSpan {
  i64 begin, end;
};
EJK_HD PageSpan page_span(const PageAttentionParams& p, i64 s) {
  const i64 n = min_of(max_of((i64)p.context_lens[s], (i64)0), p.max_context);
  const i64 b = p.window > 0 ? max_of(n - p.window, (i64)0) : (i64)0;
  return {b, n};
}

// The cache block of position j of sequence s, clamped into the cache: the host checks tables
// it can read, so a bad index from a device-resident table gives wrong values, never a read
// outside the cache.
EJK_HD i64 page_block(const PageAttentionParams& p, i64 s, i64 j) {
  const i64 b = p.block_tables[s * p.bt_ss + j / p.block_size];
  return min_of(max_of(b, (i64)0), p.num_blocks - 1);
}

// The combine kernel: CUDA threads per block (a warp per (sequence, head) row).
constexpr int kPageCombineThreads = 256;
// The attention kernel: positions per tile, threads per block, and the widest GQA group a block
// keeps in registers and shared memory at once (wider groups take several blocks).
constexpr int kPageTile = 64, kPageThreads = 128, kPageMaxGroup = 16;

// The attention kernel's dynamic shared memory, bytes, for head_dim d of esize-byte elements:
// the K tile (rows padded by one 16-byte chunk), the V tile, the group's f32 queries, two halves
// of the tile's scores, and the running max, sum and rescale per head.
EJK_HD constexpr i64 page_smem_bytes(i64 d, i64 esize) {
  const i64 chunk = 16 / esize, row = (d + chunk - 1) / chunk * chunk;
  return kPageTile * (2 * row + chunk) * esize + (kPageMaxGroup * row + 2 * kPageMaxGroup * kPageTile + 3 * kPageMaxGroup) * 4;
}

// The tensor-core decode (cuda/page_decode_tc.cuh): 16-bit elements, D a multiple of 16 up to
// 256, and 16-byte chunk loads allowed (vec); else the kernel above. Its K and V stages in
// flight, and its shared memory: the padded query tile and the stages' rows, padded by 8.
constexpr int kPageTcStages = 3;
EJK_HD constexpr bool page_uses_tc(i64 d, i64 esize, bool vec) { return esize == 2 && d % 16 == 0 && d <= 256 && vec; }
EJK_HD constexpr i64 page_tc_smem_bytes(i64 d) { return (kPageMaxGroup + 2 * kPageTcStages * kPageTile) * (d + 8) * 2; }

}  // namespace ejk
