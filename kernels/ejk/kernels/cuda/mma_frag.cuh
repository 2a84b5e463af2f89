// mma.sync m16n8k16 operand fragments from 16-bit shared memory rows of pitch `ld` elements
// (ldmatrix x4), for the small chunked kernels (recurrent_chunk.cuh, delta_chunk.cuh).
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// A (16 x 16 at rows m0.., columns k0..) from [m][k] rows.
__device__ __forceinline__ void frag_a(u32 (&a)[4], const u16* base, int ld, int m0, int k0) {
  const int l = threadIdx.x % 32;
  ldmatrix_x4(a, smem_addr(base + (m0 + (l & 15)) * ld + k0 + (l >> 4) * 8));
}
// A from its transpose stored as [k][m] rows.
__device__ __forceinline__ void frag_a_t(u32 (&a)[4], const u16* base, int ld, int m0, int k0) {
  const int l = threadIdx.x % 32;
  ldmatrix_x4_trans(a, smem_addr(base + (k0 + (l & 7) + ((l >> 4) << 3)) * ld + m0 + ((l >> 3) & 1) * 8));
}
// B of two n8 tiles (n0 and n0 + 8: b[0..1], b[2..3]) over k0..k0 + 15, from [n][k] rows.
__device__ __forceinline__ void frag_b_nk(u32 (&b)[4], const u16* base, int ld, int n0, int k0) {
  const int l = threadIdx.x % 32;
  ldmatrix_x4(b, smem_addr(base + (n0 + (l & 7) + ((l >> 4) << 3)) * ld + k0 + ((l >> 3) & 1) * 8));
}
// B of two n8 tiles from [k][n] rows.
__device__ __forceinline__ void frag_b_kn(u32 (&b)[4], const u16* base, int ld, int k0, int n0) {
  const int l = threadIdx.x % 32;
  ldmatrix_x4_trans(b, smem_addr(base + (k0 + (l & 15)) * ld + n0 + (l >> 4) * 8));
}

// One online-softmax step over a C-fragment score tile sc (log2 units; rows lane / 4 and + 8,
// NT n8 tiles): the running max m and sum l, the output o rescaled, sc replaced by P. A row
// with no position yet (max -inf) takes base 0 so its exp2s are 0; kEmptyRows false says none is.
template <bool kEmptyRows, int NT, int DT>
__device__ __forceinline__ void online_softmax_tile(float (&sc)[NT][4], float (&m)[2], float (&l)[2],
                                                    float (&o)[DT][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = fmax_f32(sc[0][2 * r], sc[0][2 * r + 1]);
#pragma unroll
    for (int nt = 1; nt < NT; ++nt) mx = fmax_f32(mx, fmax_f32(sc[nt][2 * r], sc[nt][2 * r + 1]));
    mx = quad_max(mx);
    const float mn = fmax_f32(m[r], mx);
    const float base = kEmptyRows && mn == neg_inf_f32() ? 0.0f : mn;
    const float alpha = fast_exp2(m[r] - base);
    m[r] = mn;
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) sum += (sc[nt][e] = fast_exp2(sc[nt][e] - base));
    l[r] = l[r] * alpha + sum;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][2 * r] *= alpha, o[dt][2 * r + 1] *= alpha;
  }
}

}  // namespace ejk::cuda
