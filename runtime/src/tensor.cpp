#include "ejk/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <new>

#include "device_memory.h"
#include "ejk/core/error.h"

namespace ejk {

std::string to_string(Device d) {
  switch (d.kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return fmt::format("cuda:{}", d.index);
    case DeviceKind::hip: return fmt::format("hip:{}", d.index);
  }
  return "?";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool TensorView::is_contiguous() const { return strides == contiguous_strides(shape); }

std::string TensorView::describe() const {
  return fmt::format("{}[{}] on {}", dtype_name(dtype), fmt::join(shape, ", "), to_string(device));
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= shape[i];
  }
  return st;
}

size_t Tensor::nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device) {
  for (int64_t s : shape)
    if (s < 0) throw InvalidArgument(fmt::format("Tensor::empty: negative dimension {}", s));
  Tensor t;
  t.view_.dtype = dtype;
  t.view_.device = device;
  t.view_.strides = contiguous_strides(shape);
  t.view_.shape = std::move(shape);
  if (device.kind == DeviceKind::cpu) {
    // 64-byte alignment: whole cache lines, and aligned vector loads in the CPU kernels.
    size_t bytes = std::max<size_t>(64, (t.nbytes() + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  } else {
    void* p = detail::device_alloc(device, t.nbytes());
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
