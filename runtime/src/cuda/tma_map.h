// Host side of TMA tensor maps, for any op: checks a view against the copy engine's limits
// (errors name the op's tensor) and encodes it through the driver loaded at run time.
#pragma once
#include "ejk/kernels/cuda/sm90/tma_desc.cuh"

namespace ejk::cuda {

// Element types and swizzles the kernels use (cuda.h's numbering, cuda_driver.h).
struct TmaMapFormat {
  int dtype;        // CUtensorMapDataType
  int elem_bytes;
  int swizzle;      // CUtensorMapSwizzle
  int l2_promotion; // CUtensorMapL2promotion
};
// 16-bit elements in 128-byte swizzled rows, zero fill past the edges: what sm90a tiles read.
TmaMapFormat tma_format_16bit_sw128();

// How errors name a tensor: "flash_attention (CUDA sm90a): q". Pieces, not a string, so that a
// launch formats nothing unless it fails.
struct TensorName {
  const char* op;
  const char* where;
  const char* tensor;
};

// Throws InvalidArgument naming the tensor when v breaks a
// limit: base not 16-byte aligned, a stride not a multiple of 16 bytes or >= 2^40 bytes, an axis
// of 2^31 or more elements past the first (the kernels' 32-bit row coordinates), an empty axis,
// or a box of more than 256 elements per axis.
void check_tma_view(const TmaTensorView& v, const TensorName& tensor);

// check_tma_view, then the driver's encoding of a 4-D tiled map; driver errors name the tensor too.
TmaDescriptor encode_tma_map(const TmaTensorView& v, const TmaMapFormat& f, const TensorName& tensor);

}  // namespace ejk::cuda
