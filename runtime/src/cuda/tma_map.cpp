#include "cuda/tma_map.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "cuda/cuda_driver.h"
#include "ejk/core/error.h"

namespace ejk::cuda {

namespace {
std::string name(const TensorName& t) { return fmt::format("{} ({}): {}", t.op, t.where, t.tensor); }
}  // namespace

TmaMapFormat tma_format_16bit_sw128() {
  return {kTensorMapUint16, 2, kTensorMapSwizzle128B, kTensorMapL2Promotion256B};
}

void check_tma_view(const TmaTensorView& v, const TensorName& tensor) {
  if (reinterpret_cast<uintptr_t>(v.base) % 16 != 0)
    throw InvalidArgument(fmt::format("{} must be 16-byte aligned for TMA copies", name(tensor)));
  for (int i = 0; i < 3; ++i) {
    if (v.strides[i] % 16 != 0)
      throw InvalidArgument(fmt::format("{} has a stride of {} bytes: TMA copies need multiples of 16",
                                        name(tensor), v.strides[i]));
    if (v.strides[i] >= (uint64_t(1) << 40))
      throw InvalidArgument(fmt::format("{} has a stride of 2^40 bytes or more, beyond what TMA addresses",
                                        name(tensor)));
  }
  for (int i = 0; i < 4; ++i) {
    if (v.dims[i] == 0)
      throw InvalidArgument(fmt::format("{}: axis {} of its TMA view is empty", name(tensor), i));
    if (i > 0 && v.dims[i] >= (uint64_t(1) << 31))
      throw InvalidArgument(fmt::format("{} has 2^31 or more rows, heads or batches (axis {}): the kernels' "
                                        "coordinates are 32-bit", name(tensor), i));
    if (v.box[i] == 0 || v.box[i] > 256)
      throw InvalidArgument(fmt::format("{}: a TMA box holds 1 to 256 elements per axis, not {} (axis {})",
                                        name(tensor), v.box[i], i));
  }
}

TmaDescriptor encode_tma_map(const TmaTensorView& v, const TmaMapFormat& f, const TensorName& tensor) {
  check_tma_view(v, tensor);
  const CudaDriver& d = CudaDriver::get();
  uint64_t dims[4], strides[3];
  for (int i = 0; i < 4; ++i) dims[i] = v.dims[i];
  for (int i = 0; i < 3; ++i) strides[i] = v.strides[i];
  const unsigned ones[4] = {1, 1, 1, 1};
  TmaDescriptor map{};
  const CUresult r = d.cuTensorMapEncodeTiled(&map, f.dtype, 4, const_cast<void*>(v.base), dims, strides, v.box,
                                              ones, /*interleave=*/0, f.swizzle, f.l2_promotion,
                                              kTensorMapOobFillZero);
  // The message only on failure: this runs for every tensor of every sm90a launch.
  if (r != 0) d.check(r, fmt::format("encoding the TMA descriptor of {}", name(tensor)).c_str());
  return map;
}

}  // namespace ejk::cuda
