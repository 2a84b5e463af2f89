// The copy behind FlashFwdBiasRows (flash_params.h): what the runtime runs before a bias key's
// kernel when the bias rows are not aligned for its reads (runtime/src/ops/flash_attention/flash_cuda.cpp align_bias). Its own
// op (specs/flash_fwd_bias_rows.yaml, templates/flash_fwd_bias_rows.cuda.cu.tmpl): one cubin per
// arch, built ahead of time, serves every bias key. One warp per row; each lane writes 16-byte
// chunks.
#pragma once
#include "ejk/kernels/common/flash_params.h"

namespace ejk::cuda {

// Bytes [off, off + 16) of the 32 bytes in w (off even, 0..14). The word and half-word shifts
// are selects on constant indices, so w stays in registers.
__device__ __forceinline__ uint4 bias_rows_shift(const u32 (&w)[8], u32 off) {
  u32 a[6], b[5], o[4];
#pragma unroll
  for (int i = 0; i < 6; ++i) a[i] = (off & 8) ? w[i + 2] : w[i];
#pragma unroll
  for (int i = 0; i < 5; ++i) b[i] = (off & 4) ? a[i + 1] : a[i];
  // The high half of one word, then the low half of the next.
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = (off & 2) ? __byte_perm(b[i], b[i + 1], 0x5432) : b[i];
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Keys [8 j, 8 j + 8) of a row one key at a time, zero past `keys`: the row's last chunks, whose
// aligned 16-byte loads would read past the row's bytes (past the tensor for its last row).
__device__ __forceinline__ uint4 bias_rows_tail(const u16* src, i64 j, i64 keys) {
  u32 o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const i64 k = 8 * j + 2 * i;
    const u32 lo = k < keys ? src[k] : 0u, hi = k + 1 < keys ? src[k + 1] : 0u;
    o[i] = lo | (hi << 16);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// Grid (x, y, z) walks (rows, heads, batches); each warp takes rows of its (batch, head) plane.
// No integer division: its 64-bit form is a subroutine that doubled ptxas's time on this kernel.
__device__ __forceinline__ void flash_fwd_bias_rows(const FlashFwdBiasRows& c) {
  const int lane = int(threadIdx.x) & 31;
  const i64 warps = blockDim.x >> 5;
  const i64 chunks = ceil_div(c.keys, i64(8));
  for (i64 b = blockIdx.z; b < c.batches; b += gridDim.z)
    for (i64 h = blockIdx.y; h < c.heads; h += gridDim.y)
      for (i64 r = blockIdx.x * warps + (threadIdx.x >> 5); r < c.rows; r += gridDim.x * warps) {
        const u16* __restrict__ src = c.src + b * c.stride_b + h * c.stride_h + r * c.stride_q;
        uint4* __restrict__ dst =
            reinterpret_cast<uint4*>(c.dst + ((b * c.heads + h) * c.rows + r) * c.pitch);
        // Chunk j of the row lies in the aligned 16-byte granules j and j + 1 from `base`
        // (granule j alone when the row is aligned); a granule's bytes before the row are the
        // 16-byte aligned allocation's own.
        const u64 at = reinterpret_cast<u64>(src), end = at + 2 * u64(c.keys);
        const u32 off = u32(at & 15);
        const uint4* __restrict__ base = reinterpret_cast<const uint4*>(at - off);
        const u64 span = off != 0 ? 32 : 16;
        for (i64 j = lane; j < chunks; j += 32) {
          if (at - off + 16 * u64(j) + span <= end) {
            const uint4 g0 = base[j], g1 = off != 0 ? base[j + 1] : g0;
            const u32 w[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
            dst[j] = bias_rows_shift(w, off);
          } else {
            dst[j] = bias_rows_tail(src, j, c.keys);
          }
        }
      }
}

}  // namespace ejk::cuda
