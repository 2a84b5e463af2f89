// The gate gradients of the chunked backward (cuda/linear_chunk_bwd.cuh), and the view of a
// block's unit both share. Per state row r (row_gates: the gradient of a per-row gate; its sum
// over r is that of the scalar one):
//     d l_n[r] = sum_{i >= n} (q_i dq_i - k_i dk_i)[r] + sum_c exp(G_C) (dS . S0)[r, c]
//                + sum_j (k_j dk_state_j)[r]
// with dk_state the dS part of dk: the same numbers as in k dk, so that they cancel exactly. A
// scalar gate gradient (row_gates false) is formed without the cancellation of q dq against
// k dk: with T_ij = scale A_ij (q_i . k_j)(dO_i . v_j) in f32,
//     d l_n = sum_{i >= n} (q_i . dq_inter_i + sum_j T_ij - sum_j T_ji - k_i . dk_state_i)
//             + exp(G_C) dS . S0 + sum_j k_j . dk_state_j
// each term from the same f32 numbers. When wanted, the gradient of a per-column log decay
// (recurrent attention's gv, absent here, so that of a gate of zeros), the tile's own:
// d l_n[c] = sum_{i >= n} (dO_i o'_i - v_i dv'_i)[c] + sum_r exp(G_C) (dS . S0)[r, c]
// + sum_j (v_j dv_state_j)[c], with o' and dv' the output and dv without the skip.
#pragma once
#include "ejk/kernels/cuda/linear_chunk.cuh"

namespace ejk::cuda {

struct ChunkBwdView {
  ChunkView f;  // the forward's operands: q, k, v, gate, h0 (o and ht unused)
  const u16* d_o;
  i64 sdo;
  u16* dv;  // null: not written
  i64 sdv;
  u16* dgv;  // the column gate's gradient; null: not wanted
  i64 sdgv;
  // Step n's partial sums at part + n * spart (f32): dq [K], dk [K], then d l [K] (row_gates)
  // or d l [1] and, when weighted, dw [1].
  float* part;
  i64 spart;
  bool row_gates;
  const float* dht;  // at the state's strides; null: zeros
  float* dh0;        // null: not written
  float* ckpt;       // chunk c's start state at ckpt + c * K * 32, [K][32] f32
};

constexpr int kChunkP = int(linear_chunk_pitch(kLinearChunk));

// The scalar gate gradient's per-step terms (shared f32, [64] each; col [4][64], a warp's own).
struct ChunkGateSums {
  float *inter, *row, *col, *state;
};

// sum_c dS[r, c] X[r, c] for the warp's state rows (X: a checkpoint), into rs[r].
template <int K>
__device__ __forceinline__ void chunk_row_terms(float* rs, const float (&D)[kChunkStateTiles<K>][4][4],
                                                const float* end) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * (K / 4) + mt * 16 + lane / 4 + h * 8;
      float acc = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = nt * 8 + lane % 4 * 2;
        acc += D[mt][nt][2 * h] * end[r * kLinearChunkCols + c] + D[mt][nt][2 * h + 1] * end[r * kLinearChunkCols + c + 1];
      }
      acc = quad_sum(acc);
      if (lane % 4 == 0) rs[r] = acc;
    }
}

// sum_r dS[r, c] X[r, c] over the warp's state rows (X: a checkpoint), into cs[warp][c].
template <int K>
__device__ __forceinline__ void chunk_col_terms(float* cs, const float (&D)[kChunkStateTiles<K>][4][4],
                                                const float* end) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = nt * 8 + lane % 4 * 2 + e;
      float acc = 0.0f;
#pragma unroll
      for (int mt = 0; mt < kChunkStateTiles<K>; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * (K / 4) + mt * 16 + lane / 4 + h * 8;
          acc += D[mt][nt][2 * h + e] * end[r * kLinearChunkCols + c];
        }
#pragma unroll
      for (int o = 4; o < 32; o *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane < 4) cs[warp * kLinearChunkCols + c] = acc;
    }
}

// The column gate terms of the warp's rows i: yv[i][c] = dO_i o'_i - v_i dv'_i, with
// o' = scale exp(G_i) q S0 + PA v recomputed and dv' (acc) without the skip.
template <Elem E, int K, int PK, int PV>
__device__ __forceinline__ void chunk_bwd_col_rows(float* yv, const float (&dv)[4][4], const u16* sq, const u16* ss,
                                                   const u16* spa, const u16* sv, const u16* sdo, const float* G,
                                                   float scale) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row0 = 16 * warp;
  float O[4][4] = {};
  chunk_warp_mma<E, K / 16, 2>(
      O, 0, K / 16, 2, [&](u32(&a)[4], int kb) { frag_a(a, sq, PK, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, ss, PV, kb * 16, nb * 16); });
  const float f0 = scale * expf(G[row0 + lane / 4]), f1 = scale * expf(G[row0 + lane / 4 + 8]);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) O[nt][0] *= f0, O[nt][1] *= f0, O[nt][2] *= f1, O[nt][3] *= f1;
  chunk_warp_mma<E, 4, 2>(
      O, 0, warp, 2, [&](u32(&a)[4], int kb) { frag_a(a, spa, kChunkP, row0, kb * 16); },
      [&](u32(&b)[4], int kb, int nb) { frag_b_kn(b, sv, PV, kb * 16, nb * 16); });
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int i = row0 + lane / 4 + x / 2 * 8, c = nt * 8 + lane % 4 * 2 + x % 2;
      yv[i * kLinearChunkCols + c] = to_f32<E>(sdo[i * PV + c]) * O[nt][x] - to_f32<E>(sv[i * PV + c]) * dv[nt][x];
    }
}

// x_i . acc_i over the K columns for the lane's row i of half h (row 16w + lane / 4 + 8h; x:
// 16-bit [i][K] rows), summed over the quad.
template <Elem E, int K, int PK>
__device__ __forceinline__ float chunk_row_dot(const float (&acc)[K / 8][4], const u16* x, int i, int h) {
  const int lane = threadIdx.x % 32;
  float d = 0.0f;
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt) {
    const int r = nt * 8 + lane % 4 * 2;
    d += to_f32<E>(x[i * PK + r]) * acc[nt][2 * h] + to_f32<E>(x[i * PK + r + 1]) * acc[nt][2 * h + 1];
  }
  return quad_sum(d);
}

// out[i] = x_i . acc_i over the K columns, for the warp's rows i (x: 16-bit [i][K] rows).
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_row_dots(float* out, const float (&acc)[K / 8][4], const u16* x) {
  const int lane = threadIdx.x % 32, i0 = 16 * (threadIdx.x / 32) + lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = i0 + 8 * h;
    const float d = chunk_row_dot<E, K, PK>(acc, x, i, h);
    if (lane % 4 == 0) out[i] = d;
  }
}

// out[warp][r] = sum over the warp's rows j of w_j x_j[r] acc_j[r] (x: 16-bit [j][K] rows; W
// null: weights 1).
template <Elem E, int K, int PK>
__device__ __forceinline__ void chunk_col_dots(float* out, const float (&acc)[K / 8][4], const u16* x, const float* W) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, j0 = 16 * warp + lane / 4, j1 = j0 + 8;
  const float w0 = W != nullptr ? W[j0] : 1.0f, w1 = W != nullptr ? W[j1] : 1.0f;
#pragma unroll
  for (int nt = 0; nt < K / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = nt * 8 + lane % 4 * 2 + e;
      float c = w0 * to_f32<E>(x[j0 * PK + r]) * acc[nt][e] + w1 * to_f32<E>(x[j1 * PK + r]) * acc[nt][2 + e];
#pragma unroll
      for (int o = 4; o < 32; o *= 2) c += __shfl_xor_sync(0xffffffffu, c, o);
      if (lane < 4) out[warp * K + r] = c;
    }
}

// The scalar gate gradient of the chunk's steps by warp 0: the end state's term (rs: the rows
// of dS . S0, and gs.state), then a suffix sum over the steps, lane l taking steps 63 - 2l and
// 62 - 2l so that the lanes' prefix scan runs from the last step back.
template <int K>
__device__ __forceinline__ void chunk_bwd_scalar_gates(const ChunkBwdView& b, const ChunkGateSums& gs, const float* rs,
                                                       const float* G, i64 n0, int rows) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  float s0 = 0.0f, st = 0.0f;
  for (int r = lane; r < K; r += 32) s0 += rs[r];
  for (int j = lane; j < kLinearChunk; j += 32) st += gs.state[j];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) s0 += __shfl_xor_sync(0xffffffffu, s0, o), st += __shfl_xor_sync(0xffffffffu, st, o);
  float d[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int i = kLinearChunk - 1 - 2 * lane - t;
    float col = 0.0f;
#pragma unroll
    for (int w = 0; w < kLinearChunkThreads / 32; ++w) col += gs.col[w * kLinearChunk + i];
    d[t] = i < rows ? gs.inter[i] + gs.row[i] - col - gs.state[i] : 0.0f;
  }
  float incl = d[0] + d[1];
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  const float base = expf(G[kLinearChunk - 1]) * s0 + st;
  const int i0 = kLinearChunk - 1 - 2 * lane;  // its suffix sum is incl - d[1]; i0 - 1's is incl
  if (i0 < rows) b.part[(n0 + i0) * b.spart + 2 * K] = base + incl - d[1];
  if (i0 - 1 < rows) b.part[(n0 + i0 - 1) * b.spart + 2 * K] = base + incl;
}

// The gate gradients of the chunk's steps: per state row (a thread each), from the end state's
// term (rs: the rows of dS . S0; ks: of k dk_state per warp) back through the steps,
// d l_n = end + sum_{i >= n} g_i; per column likewise when wanted.
template <Elem E, int K>
__device__ __forceinline__ void chunk_bwd_gates(const ChunkBwdView& b, const float* g, const float* rs, const float* ks,
                                                const float* G, const float* yv, const float* cs, const float* vs, i64 n0,
                                                int rows) {
  const float decay = expf(G[kLinearChunk - 1]);
  for (int r = threadIdx.x; r < K; r += kLinearChunkThreads) {
    float run = decay * rs[r];
    for (int w = 0; w < kLinearChunkThreads / 32; ++w) run += ks[w * K + r];
    for (int i = rows - 1; i >= 0; --i) {
      run += g[i * K + r];
      b.part[(n0 + i) * b.spart + 2 * K + r] = run;
    }
  }
  const int c = threadIdx.x;
  if (b.dgv == nullptr || c >= b.f.ncols) return;
  float run = 0.0f;
  for (int w = 0; w < kLinearChunkThreads / 32; ++w) run += decay * cs[w * kLinearChunkCols + c] + vs[w * kLinearChunkCols + c];
  for (int i = rows - 1; i >= 0; --i) {
    run += yv[i * kLinearChunkCols + c];
    b.dgv[(n0 + i) * b.sdgv + c] = u16(pack2<E>(run, 0.0f) & 0xffffu);
  }
}

}  // namespace ejk::cuda
