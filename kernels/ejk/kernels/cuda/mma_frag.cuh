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

}  // namespace ejk::cuda
