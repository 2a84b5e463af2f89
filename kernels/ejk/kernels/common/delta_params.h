// The gated delta rule (gated_delta_rule, kernel_delta_attention and their backward): the
// parameters every kernel takes, and the semantics the CPU and CUDA kernels and the float64
// reference share.
//
// Per sequence and head, a state S [K, V] (f32) walks the tokens first to last. With
// use_qk_l2norm, q and k are first divided by sqrt(sum x^2 + 1e-6); q is then scaled. One step,
// with a = exp(clamp(decay_t, -20, 20)) (1 without decay):
//     P = a S                       (delta_decay; 0 instead where a new segment begins)
//     u = P^T k                     (what the memory returns for k)
//     d = beta (v - u)
//     S = P + k d^T                 (delta_update)
//     o = S^T (scale q)             (after the update)
// Every column j of S evolves on its own, so a kernel may split V into tiles. The backward
// carries D = dL/dS back: D += (scale q) do^T; dd = D^T k; dv = beta dd; du = -beta dd;
// dbeta = dd . (v - u); dk = D d + P du; dP = D + k du^T; ddecay = sum(dP * P) (0 where the
// decay is clamped); D = a dP before the step (0 across a segment start).
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

// A [B, T, H, X] token tensor ([B, T, H] for beta and decay): element strides; X contiguous.
struct DeltaTokens {
  void* data;
  i64 sb, st, sh;  // between sequences, tokens, heads
};

struct DeltaParams {
  // Forward reads q, k, v, beta, decay, seg_ids, h0 and writes o (and ht when given). The
  // backward also reads d_o (and dht) and writes the gradients given (null: not wanted).
  DeltaTokens q, k, v, beta, decay, o;
  DeltaTokens d_o, dq, dk, dv, dbeta, ddecay;
  const i32* seg_ids;   // [B, T] contiguous, or null: one segment per sequence
  const float* h0;      // initial_state, contiguous [B, H, K, V], or null (zeros)
  float* ht;            // final_state (forward), or null
  const float* dht;     // d_final_state (backward), or null (zeros)
  float* dh0;           // d_initial_state (backward), or null
  i64 sequences, seqlen, heads, dk_, dv_;  // B, T, H, K, V
  float scale;
  i32 l2norm;           // use_qk_l2norm

  // Work split (set by the runtime per backend).
  i64 v_tile, v_tiles;  // columns of state per task or block, and how many tiles cover V
  i64 chunk;            // backward: tokens between checkpoints
  i64 lanes;            // CPU backward: tasks; task w takes units w, w + lanes, ...
  i64 chunks_cap;       // CPU backward: checkpoints per unit (ceil(T / chunk))
  float* work;          // backward workspace (CPU: per lane; CUDA: per block), f32
  float* partial;       // CUDA backward: [v_tiles][B * T][H][2 K + 2] f32 partial sums
  i32 phase;            // CUDA backward: 0 the sweep, 1 the sum over column tiles; chunked
                        // forward: 0 the per-chunk solve, 1 the walk over chunks
  i64 chunks;           // CUDA chunked forward: chunks per sequence (ceil(T / kDeltaChunk))
};

// The clamp of every exp argument, as the seed's.
constexpr float kDeltaExpClamp = 20.0f;
constexpr float kDeltaNormEps = 1e-6f;

// CPU: state columns per forward task; a backward row is padded to a multiple of them.
constexpr i64 kDeltaCpuColumns = 16;
EJK_HD constexpr i64 delta_cpu_row(i64 v) { return ceil_div(v, kDeltaCpuColumns) * kDeltaCpuColumns; }
// CPU backward: floats of one lane's workspace: S, D, the checkpoints and a chunk's states.
EJK_HD constexpr i64 delta_cpu_lane_floats(i64 k, i64 v, i64 chunks_cap, i64 chunk) {
  return (2 + chunks_cap + chunk) * k * delta_cpu_row(v);
}
// CPU chunked forward (cpu/delta_chunk.h): floats of one lane's workspace: the state [K, V],
// q, k, k^T, W [64, K] each, U [64, V], A and the masked q k^T [64, 64], per-token values (the
// running log decay in double) and a row of coefficients; a multiple of 16 floats.
EJK_HD constexpr i64 delta_cpu_chunk_lane_floats(i64 k, i64 v) {
  const i64 kp = delta_cpu_row(k), vp = delta_cpu_row(v), c = 64;
  const i64 n = k * vp + 4 * c * kp + c * vp + 2 * c * c + 5 * c + (kp > vp ? (kp > c ? kp : c) : (vp > c ? vp : c));
  return ceil_div(n, (i64)16) * 16;
}

// CUDA: threads per block (8 warps) and the state columns a block covers (a lane each).
constexpr int kDeltaThreads = 256, kDeltaWarps = 8, kDeltaTile = 32;

// CUDA backward: floats of one block's workspace (checkpoints and a chunk's states, [K][32]
// each), and of one (tile, token, head)'s partial sums: dq and dk (K each), dbeta, d log a.
EJK_HD constexpr i64 delta_cuda_block_floats(i64 k, i64 chunks_cap, i64 chunk) { return (chunks_cap + chunk) * k * kDeltaTile; }
EJK_HD constexpr i64 delta_cuda_partial_floats(i64 k) { return 2 * k + 2; }

// CUDA chunked forward (cuda/delta_chunk.cuh): tokens per chunk, and the state columns one
// block of the walk over chunks covers.
constexpr int kDeltaChunk = 64, kDeltaChunkCols = 32;

// What the per-chunk pass hands the walk, per unit (sequence, head, chunk), in the input's
// 16-bit type: W = T (beta e^G k) and the scaled operands, [64, K] each; the masked, decayed
// q k^T [64, 64]; U = T (beta v) [64, V]; and exp(G_last) (0 past a segment start) in f32.
struct DeltaChunkWork {
  u16 *w, *qg, *kd, *pm, *u;
  float* gc;
};

EJK_HD constexpr i64 delta_chunk_round16(i64 bytes) { return (bytes + 15) / 16 * 16; }

EJK_HD constexpr i64 delta_chunk_work_bytes(i64 units, i64 k, i64 v) {
  return delta_chunk_round16(units * 4) + units * kDeltaChunk * (3 * k + kDeltaChunk + v) * 2;
}

// The regions of a workspace of delta_chunk_work_bytes(units, k, v) at base (16-byte aligned).
EJK_HD DeltaChunkWork delta_chunk_work(void* base, i64 units, i64 k, i64 v) {
  DeltaChunkWork w{};
  char* at = static_cast<char*>(base);
  w.gc = reinterpret_cast<float*>(at);
  at += delta_chunk_round16(units * 4);
  const i64 rows = units * kDeltaChunk;
  w.w = reinterpret_cast<u16*>(at), at += rows * k * 2;
  w.qg = reinterpret_cast<u16*>(at), at += rows * k * 2;
  w.kd = reinterpret_cast<u16*>(at), at += rows * k * 2;
  w.pm = reinterpret_cast<u16*>(at), at += rows * kDeltaChunk * 2;
  w.u = reinterpret_cast<u16*>(at);
  return w;
}

// Shared memory rows are padded by 8 elements (16 bytes) so that the 8 rows one ldmatrix phase
// reads fall on distinct banks.
EJK_HD constexpr i64 delta_chunk_pitch(i64 n) { return n + 8; }
// Bytes of the per-chunk pass's shared memory: raw q, k, v rows, the two scaled inverses, the
// f32 system and per-token values (cuda/delta_chunk.cuh's DeltaPrepSmem).
EJK_HD constexpr i64 delta_chunk_prep_smem(i64 k, i64 v) {
  return 2 * (kDeltaChunk * (2 * delta_chunk_pitch(k) + delta_chunk_pitch(v) + 2 * delta_chunk_pitch(kDeltaChunk))) +
         4 * (kDeltaChunk * (kDeltaChunk + 4) + 8 * kDeltaChunk);
}
// Bytes of the walk's shared memory: two stages of a chunk's operands, the state and V'
// (DeltaWalkSmem).
EJK_HD constexpr i64 delta_chunk_walk_smem(i64 k) {
  const i64 stage = kDeltaChunk * (3 * delta_chunk_pitch(k) + delta_chunk_pitch(kDeltaChunk) +
                                   delta_chunk_pitch(kDeltaChunkCols));
  return 2 * (2 * stage + (k + kDeltaChunk) * delta_chunk_pitch(kDeltaChunkCols));
}

// Offset in elements of (sequence s, token t, head h) in a token tensor.
EJK_HD i64 delta_at(const DeltaTokens& x, i64 s, i64 t, i64 h) { return s * x.sb + t * x.st + h * x.sh; }

// Offset in elements of state (s, h) in a contiguous [B, H, K, V] state.
EJK_HD i64 delta_state_at(const DeltaParams& p, i64 s, i64 h) { return (s * p.heads + h) * p.dk_ * p.dv_; }

// Whether token t of sequence s starts a new segment (its state before the step is 0).
EJK_HD bool delta_resets(const DeltaParams& p, i64 s, i64 t) {
  return p.seg_ids != nullptr && t > 0 && p.seg_ids[s * p.seqlen + t] != p.seg_ids[s * p.seqlen + t - 1];
}

// The decay's exp argument, clamped; `live` says whether the clamp left it unchanged.
EJK_HD float delta_log_decay(float g, bool* live) {
  const float c = min_of(max_of(g, -kDeltaExpClamp), kDeltaExpClamp);
  *live = c == g;
  return c;
}

// One column entry of the step: S = P + k_i d_j.
template <class F, class R> EJK_HD F delta_update(F prior, R k_i, F d_j) { return prior + k_i * d_j; }

}  // namespace ejk
