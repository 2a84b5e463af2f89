// Op-free sm_90a TMA store epilogue: a consumer warpgroup's accumulator rows (mma C-fragment
// layout, 16 rows per warp) are packed to 16-bit pairs into a 128-byte-swizzled staging tile in
// shared memory, then leave through one TMA store per 64 columns that the warpgroup does not
// wait for. The caller owns the staging tile's reuse (bulk_wait_read before overwriting a tile
// a previous store may still read) and the barriers around the staging.
#pragma once
#include "ejk/kernels/cuda/ptx.cuh"

namespace ejk::cuda::sm90 {

// Byte offset of 16-byte chunk c (along the columns) of row r in a tile of `rows` rows stored as
// boxes of 64 columns, each row 128 bytes with the 128-byte swizzle (chunk c % 8 at c % 8 ^ r % 8).
__device__ __forceinline__ u32 sw128_offset(int r, int c, int rows) {
  return u32((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r & 7)) << 4));
}

// Writes a warp's two fragment rows (rows warp_row0 + lane / 4 and + 8) of kDTiles 8-column
// tiles, each multiplied by its row's scale, into the staging tile of kTileRows rows at `tile`
// (a generic pointer to its shared memory). The 4-byte writes of a warp hit 32 distinct banks.
template <Elem E, int kDTiles, int kTileRows>
__device__ __forceinline__ void stage_rows_sw128(unsigned char* tile, const float (&acc)[kDTiles][4],
                                                 const float (&scale)[2], int warp_row0, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = warp_row0 + (lane >> 2) + half * 8;  // row in the tile
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const u32 off = sw128_offset(r, dt, kTileRows) + (lane & 3) * 4;
      *reinterpret_cast<u32*>(tile + off) =
          pack2<E>(acc[dt][2 * half] * scale[half], acc[dt][2 * half + 1] * scale[half]);
    }
  }
}

// One thread: the staged rows [row0, row0 + box rows) of the tile at shared address `tile` out
// through `map` (boxes of 64 columns), at coordinates (column block * 64, c1, c2, c3); committed
// as one bulk group.
template <int kColBlocks, int kTileRows>
__device__ __forceinline__ void store_rows_tma(const void* map, u32 tile, int row0, int c1,
                                               int c2, int c3) {
#pragma unroll
  for (int c = 0; c < kColBlocks; ++c)
    tma_store_4d(map, tile + c * kTileRows * 128 + row0 * 128, c * 64, c1, c2, c3);
  bulk_commit();
}

}  // namespace ejk::cuda::sm90
