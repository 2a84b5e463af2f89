#include "ejk/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "device_memory.h"
#include "ejk/core/error.h"

namespace ejk {

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

Tensor Tensor::empty(const Dims& shape, DType dtype, Device device) {
  Tensor t;
  t.view_.dtype = dtype;
  t.view_.device = device;
  t.view_.shape = shape;
  t.view_.strides = contiguous_strides(shape);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(t.view_.numel(), int64_t(dtype_size(dtype)), &bytes) || bytes > (int64_t{1} << 56))
    throw InvalidArgument(fmt::format("Tensor::empty: {} is too large", t.view_.describe()));
  if (device.kind == DeviceKind::cpu) {
    // 64-byte alignment: whole cache lines, and aligned vector loads in the CPU kernels.
    size_t rounded = std::max<size_t>(64, (size_t(bytes) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw InvalidArgument(fmt::format("Tensor::empty: cannot allocate {} bytes for {}", rounded, t.view_.describe()));
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  } else {
    void* p = detail::device_alloc(device, size_t(bytes));
    t.storage_ = std::shared_ptr<void>(p, [device](void* q) { detail::device_free(device, q); });
  }
  t.view_.data = t.storage_.get();
  return t;
}

Tensor Tensor::to(Device device) const {
  if (!view_.is_contiguous())
    throw InvalidArgument(fmt::format("Tensor::to: {} is not contiguous", view_.describe()));
  Tensor out = empty(view_.shape, view_.dtype, device);
  if (nbytes() == 0) return out;
  if (view_.device.kind == DeviceKind::cpu) {
    detail::copy_from_host(device, out.data(), data(), nbytes());
  } else if (device.kind == DeviceKind::cpu) {
    detail::copy_to_host(view_.device, data(), out.data(), nbytes());
  } else {  // device to device through the host: rare, and not on a hot path
    Tensor host = to(Device{});
    detail::copy_from_host(device, out.data(), host.data(), nbytes());
  }
  return out;
}

}  // namespace ejk
