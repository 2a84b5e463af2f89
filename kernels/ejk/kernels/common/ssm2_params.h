// Mamba-2's state-space scan (state_space_v2 and its backward): the parameters every kernel
// takes, and the semantics the CPU and CUDA kernels and the float64 reference share.
//
// Per sequence, head h (group g = h / (H / G)) and head dim p, a state h [N] walks the tokens.
// One step, with the head's decay e = exp(a[h] dt[h]):
//     h_j = e h_j + dt x_p B_gj                    (ssm1_update, as Mamba-1 with A's row constant)
//     y_p = sum_j h_j C_gj + d[h] x_p
// The backward carries dh back: dh_j += dy_p C_gj; then, with h_prev the state before the step,
//     dx_p = dy_p d[h] + sum_j dh_j dt B_gj,   ddt += sum_p sum_j dh_j (a e h_prev_j + x_p B_gj)
//     da   += sum_p sum_j dh_j e dt h_prev_j,  dB_gj += sum_(h in g, p) dh_j dt x_p,
//     dC_gj += sum_(h in g, p) dy_p h_j,       dd += sum_p dy_p x_p;   then dh_j *= e.
// Varlen (cu_seqlens set) as Mamba-1's (common/ssm1_params.h): the token tensors are one packed
// sequence (sb 0) and sequence s walks tokens [cu[s], cu[s + 1]) (ssm1_span).
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/linear_chunk.h"
#include "ejk/kernels/common/ssm1_params.h"

namespace ejk {

// A [Bt, S, K, X] tensor (or [Bt, S, K] with X = 1): element strides between sequences, tokens
// and heads (or groups); X is contiguous.
struct Ssm2Tokens {
  void* data;
  i64 sb, ss, sh;
};

struct Ssm2Params {
  Ssm2Tokens x, dt, B, C, y;
  Ssm2Tokens d_y, dx, ddt, dB, dC;
  const float* A;   // [H]
  const float* D;   // [H]
  const float* h0;  // [Bt, H, P, N] or null (zeros)
  const i32* cu_seqlens;  // varlen: Bt + 1 token offsets; null: dense
  float* ht;        // or null; may equal h0 (each unit reads its part first)
  const float* dht;
  float* dh0;
  float* dA;  // [H]
  float* dD;  // [H]
  i64 batch, seqlen, heads, hdim, groups, nstate;  // Bt (sequences), S (varlen: packed), H, P, G, N

  // Work split (set by the runtime per backend).
  i64 tiles;       // CUDA: head-dim tiles per head
  i64 chunk;       // backward: tokens between checkpoints (C)
  i64 chunks_cap;  // backward: ceil(S / C); CPU varlen: ceil(longest / C); CUDA varlen: see below
  float* work;     // backward workspace, f32
  float* partial;  // CPU: per-sequence da, dd shares; CUDA: the f32 accumulators
  u32* done;       // CPU backward: tasks finished (the last adds the shares)
  i32 phase;       // CUDA backward: 0 zero, 1 the sweep, 2 the accumulators into the outputs
};

// CUDA forward: 16-bit keys with N 64 or 128 run as chunked SSD on tensor cores
// (cuda/ssm2_chunk.cuh), any head dim; the rest run the token-by-token scan. The key decides
// (the template and the launch plan both ask this).
EJK_HD constexpr bool ssm2_chunked(bool sixteen_bit, i64 n) { return sixteen_bit && linear_chunk_rows(n); }

// CUDA backward of the chunked keys (cuda/ssm2_chunk_bwd.cuh), per packed token row (rows =
// packs * S): the chunk-boundary states per (head, tile of 32 head dims), then per (tile, row,
// head) the partial sums [dC N][dB N][d log decay][d weight], then per (row, head) dt times the
// log decay's gradient and sum_p dy x (for da and dd).
EJK_HD constexpr i64 ssm2_chunk_part(i64 n) { return 2 * n + 2; }
EJK_HD constexpr i64 ssm2_chunk_ckpt_floats(i64 rows, i64 batch, i64 heads, i64 hdim, i64 n) {
  return heads * ceil_div<i64>(hdim, kLinearChunkCols) * linear_chunk_bwd_slots(rows, batch) * n * kLinearChunkCols;
}
EJK_HD constexpr i64 ssm2_chunk_work_floats(i64 rows, i64 batch, i64 heads, i64 hdim, i64 n) {
  return ssm2_chunk_ckpt_floats(rows, batch, heads, hdim, n) +
         ceil_div<i64>(hdim, kLinearChunkCols) * rows * heads * ssm2_chunk_part(n) + 2 * rows * heads;
}

// Blocks of the chunked backward's phases 1 to 3 (kLinearChunkThreads threads each), and their
// dynamic shared memory.
EJK_HD constexpr i64 ssm2_chunk_bwd_blocks(i32 phase, i64 batch, i64 rows, i64 heads, i64 groups, i64 hdim, i64 n) {
  if (phase == 1) return batch * heads * ceil_div<i64>(hdim, kLinearChunkCols);
  if (phase == 2) return ceil_div<i64>(rows * (groups * n + heads), kLinearChunkThreads);
  return heads;
}
EJK_HD constexpr i64 ssm2_chunk_bwd_smem(i32 phase, i64 n) {
  return phase == 1 ? linear_chunk_bwd_smem_bytes(n) : phase == 3 ? 2 * kLinearChunkThreads * 4 : 0;
}

EJK_HD i64 ssm2_at(const Ssm2Tokens& t, i64 s, i64 i, i64 h) { return s * t.sb + i * t.ss + h * t.sh; }
EJK_HD i64 ssm2_group(const Ssm2Params& p, i64 h) { return h / (p.heads / p.groups); }

// CPU backward: floats of one sequence's workspace: dh, the checkpoints and a chunk's states.
EJK_HD constexpr i64 ssm2_cpu_task_floats(i64 heads, i64 hdim, i64 n, i64 chunks_cap, i64 chunk) {
  return (1 + chunks_cap + chunk) * heads * hdim * n;
}
// CPU backward: floats of the per-sequence shares of da and dd.
EJK_HD constexpr i64 ssm2_share_floats(i64 batch, i64 heads) { return batch * heads * 2; }

// CUDA backward: the accumulators [db: packs S G N][dc: packs S G N][ddt: packs S H][da: H][dd: H]
// (packs: ssm1_packs, Bt dense and 1 packed).
EJK_HD constexpr i64 ssm2_cuda_acc_floats(i64 packs, i64 seqlen, i64 heads, i64 groups, i64 n) {
  return packs * seqlen * (2 * groups * n + heads) + 2 * heads;
}
// CUDA backward workspace: per (sequence, head, head dim) the checkpoints and C chunk states,
// [slot][j][unit].
EJK_HD constexpr i64 ssm2_cuda_work_floats(i64 batch, i64 heads, i64 hdim, i64 n, i64 chunks_cap, i64 chunk) {
  return (chunks_cap + chunk) * n * batch * heads * hdim;
}
// CUDA varlen backward: the same array, its first chunks_cap slots (ssm1_cuda_varlen_chunks_cap)
// holding the checkpoints by token position as Mamba-1's, [slot][j][head, head dim].

}  // namespace ejk
