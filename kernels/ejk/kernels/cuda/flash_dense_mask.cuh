// The dense attention mask in the CUDA flash kernels (sm80 family forward, tensor-core backward):
// the forward's walk over the device summary (flash_mask_tiles.cuh) and the per-pair mask of the
// tiles it marks partial. Semantics: mask.h's dense_mask_visible, ANDed with the other masks.
#pragma once
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/common/mask.h"
#include "ejk/kernels/cuda/flash_fwd_tile.cuh"
#include "ejk/kernels/cuda/flash_mask_tiles.cuh"

namespace ejk::cuda {

template <class C>
__device__ __forceinline__ DenseKeyTileWalk dense_key_walk(const FlashFwdParams& p, const MaskSpec& m,
                                                           const SeqSpan& seq, i64 h, i64 q0) {
  return {key_range<C>(m, q0, seq.len_k), &p, seq.index, h, q0 / C::kBlockQ, C::kBlockQ, C::kBlockK};
}

// Logits of pairs the dense mask hides set to -inf, in the forward's fragment layout (rows: the
// thread's queries, element (nt, j) key k0 + 8 nt + 2 (lane % 4) + j). Rows past len_q and keys
// past len_k are not read (their logits are -inf or never stored already).
template <class C>
__device__ __forceinline__ void mask_dense(float (&s)[C::kMTiles][C::kNTiles][4], const FlashFwdParams& p,
                                           const TileContext<C>& c, const SeqSpan& seq, i64 h, i64 k0, int lane) {
  const int lane_col = (lane & 3) * 2;
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 q = c.q_pos[mt][half];
      if (q >= seq.len_q) continue;
      const u8* row = flash_mask_row(p, seq.index, h, q);
#pragma unroll
      for (int nt = 0; nt < C::kNTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const i64 k = k0 + nt * 8 + lane_col + j;
          if (k < seq.len_k && !dense_mask_visible(row, k)) s[mt][nt][2 * half + j] = neg_inf_f32();
        }
    }
}

}  // namespace ejk::cuda
