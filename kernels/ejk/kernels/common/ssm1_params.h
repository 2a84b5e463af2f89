// Mamba-1's selective scan (state_space_v1 and its backward): the parameters every kernel takes,
// and the semantics the CPU and CUDA kernels and the float64 reference share.
//
// Per sequence and channel c, a state h [N] walks the tokens. One step, with a_j = exp(A[c, j] dt):
//     h_j = a_j h_j + dt x B_j                     (ssm1_update)
//     y   = sum_j h_j C_j + D[c] x                 (after the update)
//     out = y silu(gate)                           (with a gate; else out = y)
// The backward carries dh = dL/dh back through the steps: with gy = dout silu(gate), first
// dh_j += gy C_j; then the token's gradients read dh and the prior state, then dh_j *= a_j:
//     dx  = gy D + sum_j dh_j dt B_j,     ddt = sum_j dh_j (A_j a_j h_prev_j + x B_j)
//     dA_j += dh_j a_j dt h_prev_j,       dB_j += dh_j dt x,   dC_j += gy h_j,   dD += gy x
//     dgate = dout y silu'(gate)
// Varlen (cu_seqlens set): the token tensors are one packed sequence of `seqlen` tokens (their
// sb is 0) and sequence s walks tokens [cu[s], cu[s + 1]) (ssm1_span); dense: sequence s walks
// tokens [0, seqlen) at s * sb. Either way a kernel passes packed token indices to ssm1_at.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk {

// A [Bt, S, X] token tensor: element strides between sequences and tokens; X is contiguous.
struct Ssm1Tokens {
  void* data;
  i64 sb, ss;
};

struct Ssm1Params {
  // Forward reads x, dt, b, c, gate, a, d and h0 and writes y (and ht when given). The backward
  // also reads d_y (and dht) and writes those gradients that are given (null: not wanted).
  Ssm1Tokens x, dt, B, C, gate, y;
  Ssm1Tokens d_y, dx, ddt, dB, dC, dgate;
  const float* A;   // [Dm, N]
  const float* D;   // [Dm]
  const float* h0;  // [Bt, Dm, N] or null (zeros)
  const i32* cu_seqlens;  // varlen: Bt + 1 token offsets; null: dense
  float* ht;        // forward: [Bt, Dm, N] or null; may equal h0 (each unit reads its part first)
  const float* dht;  // backward: or null (zeros)
  float* dh0;
  float* dA;  // [Dm, N]
  float* dD;  // [Dm]
  i64 batch, seqlen, dim, nstate;  // Bt (sequences), S (varlen: packed tokens), Dm, N

  // Work split (set by the runtime per backend).
  i64 tiles;       // channel tiles per sequence
  i64 chunk;       // backward: tokens between checkpoints (C)
  i64 chunks_cap;  // backward: ceil(S / C); CPU varlen: ceil(longest / C); CUDA varlen: see below
  float* work;     // backward workspace, f32
  float* partial;  // backward: per-sequence dA, dD shares (CPU, CUDA); per-tile dB, dC (CUDA)
  u32* done;       // CPU backward: tasks finished (the last adds the shares)
  i32 phase;       // CUDA backward: 0 the sweep, 1 the sums of the partials
};

// CPU: channels per forward task.
constexpr i64 kSsm1CpuChannels = 16;
// CPU backward: floats of one sequence's workspace: dh, the checkpoints and a chunk's states.
EJK_HD constexpr i64 ssm1_cpu_task_floats(i64 dim, i64 n, i64 chunks_cap, i64 chunk) {
  return (1 + chunks_cap + chunk) * dim * n;
}
// Backward: floats of the per-sequence shares of dA and dD.
EJK_HD constexpr i64 ssm1_share_floats(i64 batch, i64 dim, i64 n) { return batch * dim * (n + 1); }

// CUDA: threads per block, a channel each (two warps: a small batch's blocks still cover the
// SMs); tokens of B and C staged at a time.
constexpr int kSsm1Threads = 64, kSsm1Stage = 16;
// CUDA backward workspace: per (sequence, channel) unit the checkpoints and C chunk states, laid
// out [slot][j][unit] so that a warp's accesses are contiguous.
EJK_HD constexpr i64 ssm1_cuda_work_floats(i64 batch, i64 dim, i64 n, i64 chunks_cap, i64 chunk) {
  return (chunks_cap + chunk) * n * batch * dim;
}
// CUDA varlen backward: the host never reads cu_seqlens, so checkpoints are placed by token
// position, [slot][j][channel]: sequence s keeps its k-th at slot begin_s / C + s + k. These
// ranges never meet (a sequence of len tokens has at most len / C + 1 checkpoints) and stay
// below total / C + Bt + 1 even for a malformed, clamped cu_seqlens. They fill the first
// chunks_cap slots of the dense layout (chunks_cap = ceil(slots / Bt) of Bt x Dm floats
// each), and the C chunk states follow as in the dense layout.
EJK_HD constexpr i64 ssm1_cuda_slots(i64 total, i64 batch, i64 chunk) { return total / chunk + batch + 1; }
EJK_HD constexpr i64 ssm1_cuda_varlen_chunks_cap(i64 total, i64 batch, i64 chunk) {
  return ceil_div(ssm1_cuda_slots(total, batch, chunk), batch > 0 ? batch : (i64)1);
}
// The leading count of the token tensors: Bt dense, 1 packed.
EJK_HD i64 ssm1_packs(const i32* cu_seqlens, i64 batch) { return cu_seqlens != nullptr ? 1 : batch; }
// CUDA backward: floats of the per-tile dB and dC partials, [tile][packs][S][2][N].
EJK_HD constexpr i64 ssm1_cuda_bc_floats(i64 tiles, i64 packs, i64 seqlen, i64 n) {
  return tiles * packs * seqlen * 2 * n;
}

// Offset in elements of (sequence s, token t) in a token tensor.
EJK_HD i64 ssm1_at(const Ssm1Tokens& t, i64 s, i64 i) { return s * t.sb + i * t.ss; }

// The tokens sequence s walks: dense [0, seqlen); varlen from cu_seqlens clamped into
// [0, seqlen] (base.h's token_span), so a malformed device-side cu_seqlens reads nothing
// outside the tensors.
EJK_HD TokenSpan ssm1_span(const i32* cu_seqlens, i64 seqlen, i64 s) {
  if (cu_seqlens == nullptr) return {0, seqlen};
  return token_span(cu_seqlens, seqlen, seqlen, s);
}

// Row of (sequence s, token i) in a [packs][S] row-major token buffer.
EJK_HD i64 ssm1_row(const i32* cu_seqlens, i64 seqlen, i64 s, i64 i) {
  return (cu_seqlens != nullptr ? 0 : s) * seqlen + i;
}

// SiLU and its derivative, for the gate.
template <class F, class Exp> EJK_HD F ssm1_sigmoid(F g, Exp exp_fn) { return F(1) / (F(1) + exp_fn(-g)); }
template <class F> EJK_HD F ssm1_silu_grad(F g, F sig) { return sig * (F(1) + g * (F(1) - sig)); }

// One step of the recurrence on a state entry.
template <class F> EJK_HD F ssm1_update(F h, F a, F dtx, F b) { return a * h + dtx * b; }

}  // namespace ejk
