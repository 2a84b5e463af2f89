// The chunked linear-recurrence forward on tensor cores (cuda/linear_chunk.cuh), shared by
// recurrent_attention and state_space_v2: its block shape and shared memory, for the kernels
// and the launch plans. Per (sequence, head, tile of 32 state columns) a block of 4 warps walks
// the steps in chunks of 64; the decay is one scalar per step (log space).
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

constexpr int kLinearChunk = 64, kLinearChunkThreads = 128, kLinearChunkCols = 32;

// Rows of 16-bit shared memory are padded by 8 elements (16 bytes: ldmatrix's rows then fall in
// distinct banks): q, k, v in two stages each, the decayed keys, the state tile, then the
// chunk's cumulative log decays and per-step key weights (f32).
EJK_HD constexpr i64 linear_chunk_pitch(i64 width) { return width + 8; }
EJK_HD constexpr i64 linear_chunk_halves(i64 k) {
  return 5 * kLinearChunk * linear_chunk_pitch(k) + 2 * kLinearChunk * linear_chunk_pitch(kLinearChunkCols) +
         k * linear_chunk_pitch(kLinearChunkCols);
}
EJK_HD constexpr i64 linear_chunk_smem_bytes(i64 k) { return linear_chunk_halves(k) * 2 + 2 * kLinearChunk * 4; }

// The key dims (state rows) the kernel is built for.
EJK_HD constexpr bool linear_chunk_rows(i64 k) { return k == 64 || k == 128; }

}  // namespace ejk

namespace ejk {

// The chunked backward (cuda/linear_chunk_bwd.cuh): q, k, the scaled queries and the f32 gate
// terms at K, v and d_o at 32 columns, the masked products P and dA at 64, the chunk-start state
// and the carried state gradient as 16-bit operands, then in f32 the row gate terms [64][K], G,
// W, a sum per state row, the column gate terms [64][32], two sums per (warp, column) and one
// per (warp, state row).
EJK_HD constexpr i64 linear_chunk_bwd_halves(i64 k) {
  return 3 * kLinearChunk * linear_chunk_pitch(k) + 2 * kLinearChunk * linear_chunk_pitch(kLinearChunkCols) +
         2 * kLinearChunk * linear_chunk_pitch(kLinearChunk) + 2 * k * linear_chunk_pitch(kLinearChunkCols);
}
EJK_HD constexpr i64 linear_chunk_bwd_smem_bytes(i64 k) {
  return linear_chunk_bwd_halves(k) * 2 +
         (kLinearChunk * k + 2 * kLinearChunk + k + (kLinearChunk + 8) * kLinearChunkCols + 4 * k) * 4;
}
// Chunk-boundary states of the backward's first pass, [K][32] f32 each, per (head, column tile):
// a sequence of len steps keeps ceil(len / 64) + 1 (its final state too), from slot
// begin / 64 + 2 s, so sequences never meet however the tokens split.
EJK_HD constexpr i64 linear_chunk_bwd_slots(i64 total, i64 sequences) { return total / kLinearChunk + 2 * sequences + 1; }
EJK_HD constexpr i64 linear_chunk_bwd_first_slot(i64 begin, i64 s) { return begin / kLinearChunk + 2 * s; }

}  // namespace ejk
