// Dropout on mma.sync fragments (common/philox.h's keep decision): the sm80 forward's P before
// P V, and the backward's P and dP. A C fragment element [mt][nt][i] of a warp is row
// row0 + mt * 16 + lane / 4 + (i / 2) * 8 and column col0 + nt * 8 + 2 * (lane % 4) + i % 2,
// the coordinates the causal mask uses.
#pragma once
#include "ejk/kernels/common/philox.h"
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda {

// Rows are queries and columns keys (the forward's S, the dq launch's): the two columns of a
// lane are one even-odd key pair, inside one Philox block of four keys.
template <int kMTiles, int kNTiles>
__device__ __forceinline__ void drop_query_rows(float (&s)[kMTiles][kNTiles][4], const DropoutParams& d, i64 b,
                                                i64 h, i64 row0, i64 col0, int lane) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const i64 i = row0 + mt * 16 + (lane >> 2) + half * 8;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const i64 j = col0 + nt * 8 + 2 * (lane & 3);
        const Philox4 w = dropout_words(d, b, h, i, j);
        s[mt][nt][2 * half] *= dropout_keep_word(d, w.w[j & 3]) ? d.scale : 0.f;
        s[mt][nt][2 * half + 1] *= dropout_keep_word(d, w.w[(j + 1) & 3]) ? d.scale : 0.f;
      }
    }
}

}  // namespace ejk::cuda
