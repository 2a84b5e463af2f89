// The linear-attention recurrence (recurrent_attention and its backward): the parameters every
// kernel takes, and the semantics the CPU and CUDA kernels and the float64 reference share.
//
// Per sequence and head, a state S [K, V] walks the sequence's tokens in processing order
// (first to last; reverse: last to first). One step, with a_i the row decay and b_j the column
// decay of the token (gates are log-space: a_i = exp(g_i + g_gamma + gk_i), b_j = exp(gv_j)):
//     S[i, j] = S[i, j] * a_i * b_j + k_i v_j        (recurrent_update)
//     o_j     = sum_i (scale q_i) S[i, j]            (after the update)
// The backward carries D = dL/dS back through the steps: D += scale q do^T, then the token's
// gradients read D and the decayed prior P = S_prev * a * b, then D *= a b^T (recurrent_carry).
// g and gk scale the same rows, so both get d(log a)_i = sum_j D P; gv gets sum_i D P.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/linear_chunk.h"

namespace ejk {

// A [B, T, H, X] token tensor (or a packed [T, H, X] one): element strides; X is contiguous.
struct RecurrentTokens {
  void* data;
  i64 sb, st, sh;  // between sequences (dense; 0 when packed), tokens, heads
};

struct RecurrentParams {
  // Forward reads q, k, v, the gates and h0 and writes o (and ht when given). The backward
  // also reads d_o (and dht) and writes those gradients that are given (null: not wanted).
  RecurrentTokens q, k, v, g, gk, gv, o;
  RecurrentTokens gh;  // g_head, [B, T, H] (X = 1)
  RecurrentTokens d_o, dq, dk, dv, dg, dgk, dgv;
  const float* g_gamma;  // [H]
  const float* h0;       // initial_state, contiguous [sequences, H, K, V], or null (zeros)
  float* ht;             // final_state (forward), or null
  const float* dht;      // d_final_state (backward), or null (zeros)
  float* dh0;            // d_initial_state (backward), or null
  const i32* cu_seqlens;  // varlen: sequences + 1 entries; null: dense
  i64 sequences;          // B (dense) or N (varlen)
  i64 seqlen;             // dense: T; varlen: unused
  i64 total;              // tokens in all: B * T (dense) or the packed T
  i64 heads, dk_, dv_;    // H, K, V
  float scale;
  i32 reverse;

  // Work split (set by the runtime per backend).
  i64 v_tile, v_tiles;  // columns of state per task or block, and how many tiles cover V
  i64 chunk;            // backward: tokens between checkpoints (C)
  i64 lanes;            // CPU backward: tasks; task w takes units w, w + lanes, ...
  i64 chunks_cap;       // CPU backward: checkpoints a unit may need (ceil(longest / C))
  float* work;          // backward workspace (CPU: per lane; CUDA: per block), f32
  float* partial;       // CUDA backward: [v_tiles][total][H][3][K] f32 partial sums
  i32 phase;            // CUDA backward: 0 the sweep, 1 the sum over column tiles
};

// CPU: state columns per forward task, and the padding of a backward row (the widest vector).
constexpr i64 kRecurrentCpuColumns = 16;
EJK_HD constexpr i64 recurrent_cpu_row(i64 v) { return ceil_div(v, kRecurrentCpuColumns) * kRecurrentCpuColumns; }
// CPU backward: floats of one lane's workspace: S, D, the checkpoints and a chunk's states.
EJK_HD constexpr i64 recurrent_cpu_lane_floats(i64 k, i64 v, i64 chunks_cap, i64 chunk) {
  return (2 + chunks_cap + chunk) * k * recurrent_cpu_row(v);
}

// CUDA: threads per block (8 warps), and the state columns a block covers (a lane each).
constexpr int kRecurrentThreads = 256, kRecurrentWarps = 8, kRecurrentTile = 32;
// CUDA backward workspace, in [K][32] f32 state tiles: first the checkpoints of every
// (head, column tile), then C chunk states per block. Checkpoints are placed by token
// position, so their room does not depend on how the tokens split into sequences: sequence s
// keeps its c-th checkpoint at slot begin_s / C + s + c of its (head, tile), and these ranges
// never meet, as a sequence of len tokens has at most len / C + 1 checkpoints.
EJK_HD constexpr i64 recurrent_cuda_slots(i64 total, i64 sequences, i64 chunk) { return total / chunk + sequences + 1; }
EJK_HD constexpr i64 recurrent_cuda_work_tiles(i64 total, i64 sequences, i64 heads, i64 v_tiles, i64 chunk) {
  return heads * v_tiles * recurrent_cuda_slots(total, sequences, chunk) + sequences * heads * v_tiles * chunk;
}

// CUDA forward, chunked on tensor cores (cuda/recurrent_chunk.cuh on cuda/linear_chunk.cuh): the
// variants whose decay is one scalar per head and token (g_gamma, g_head; no g, gk, gv), in
// 16-bit elements, with K, V in {64, 128}. The key decides (the template and the launch plan
// both ask this), so a key names one kernel.
constexpr int kRecurrentChunkThreads = kLinearChunkThreads;
static_assert(kLinearChunkCols == kRecurrentTile, "the chunked kernel's column tile is the token kernel's");
EJK_HD constexpr bool recurrent_chunked(bool sixteen_bit, i64 k, i64 v, bool g, bool gk, bool gv) {
  return sixteen_bit && !g && !gk && !gv && linear_chunk_rows(k) && (v == 64 || v == 128);
}
EJK_HD constexpr i64 recurrent_chunk_smem_bytes(i64 k) { return linear_chunk_smem_bytes(k); }

// Tokens [begin, end) of sequence s in the packed token range (base.h's token_span).
using RecurrentSpan = TokenSpan;
EJK_HD RecurrentSpan recurrent_span(const RecurrentParams& p, i64 s) {
  return token_span(p.cu_seqlens, p.seqlen, p.total, s);
}

// The packed token index of step n (0 first) of a sequence.
EJK_HD i64 recurrent_token(const RecurrentSpan& sp, i64 n, bool reverse) {
  return reverse ? sp.end - 1 - n : sp.begin + n;
}

// Offset in elements of (packed token i of sequence s, head h) in a token tensor.
EJK_HD i64 recurrent_at(const RecurrentParams& p, const RecurrentTokens& t, i64 s, i64 i, i64 h) {
  const i64 first = p.cu_seqlens == nullptr ? s * p.seqlen : 0;  // dense: i - first is t
  return s * t.sb + (i - first) * t.st + h * t.sh;
}

// Offset in elements of state (s, h) in a contiguous [sequences, H, K, V] state.
EJK_HD i64 recurrent_state_at(const RecurrentParams& p, i64 s, i64 h) { return (s * p.heads + h) * p.dk_ * p.dv_; }

// One step of the recurrence on state entries S[i, j] (F: a scalar or a vector over j; R: the
// row's scalar type).
template <class F, class R> EJK_HD F recurrent_update(F s, R row_decay, F col_decay, R k_i, F v_j) {
  return s * row_decay * col_decay + k_i * v_j;
}

// The gradient of the state carried back through one step's decay.
template <class F, class R> EJK_HD F recurrent_carry(F d, R row_decay, F col_decay) {
  return d * row_decay * col_decay;
}

// Whether a key's constants gate by g_head.
template <class Cfg> EJK_HD constexpr bool recurrent_head_gate() {
  if constexpr (requires { Cfg::kGh; }) return Cfg::kGh;
  else return false;
}

// Threads of a backward key's blocks (both phases): the chunked kernel's 128 or the token kernel's.
template <class Cfg> EJK_HD constexpr int recurrent_bwd_threads() {
  if constexpr (requires { Cfg::kThreads; }) return Cfg::kThreads;
  else return kRecurrentThreads;
}

// Checkpoints of a unit: the state before steps 0, C, 2C, ... of its sequence.
EJK_HD i64 recurrent_chunks(const RecurrentParams& p, i64 len) { return ceil_div(len, p.chunk); }

}  // namespace ejk
