// What a TMA tensor map is, for any op: the driver's 128-byte descriptor spelled without cuda.h
// (device code under NVRTC and the dlopen-based host runtime share it) and the view of a tensor
// the host encodes into one (runtime/src/cuda/tma_map.h). Plain data; no op's names.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk::cuda {

// CUtensorMap: 16 opaque 64-bit words, 64-byte aligned. Built on the host
// (cuTensorMapEncodeTiled), passed by value as a __grid_constant__ kernel argument; the TMA unit
// reads it from the parameter space.
struct alignas(64) TmaDescriptor {
  u64 opaque[16];
};
static_assert(sizeof(TmaDescriptor) == 128, "CUtensorMap is 128 bytes");

// A 4-D view (innermost first, e.g. columns, rows, heads, batch) of a tensor and the box one copy
// moves. The copy engine's limits, which the host checks: a 16-byte aligned base, strides that
// are multiples of 16 bytes and below 2^40; kernels address rows with 32-bit coordinates.
struct TmaTensorView {
  const void* base;
  u64 dims[4];     // elements per axis
  u64 strides[3];  // bytes between consecutive indices of axes 1..3
  u32 box[4];      // elements per axis of one copy
};

}  // namespace ejk::cuda
