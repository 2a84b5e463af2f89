// Tensor views (non-owning) and owning tensors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ejk/dtype.h"

namespace ejk {

enum class DeviceKind : uint8_t { cpu, cuda, hip };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};
std::string to_string(Device d);  // "cpu", "cuda:0"

// A strided view of memory it does not own. Strides are in elements.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  bool is_contiguous() const;
  std::string describe() const;  // "bf16[2, 128, 16, 64] on cpu"
};

// Row-major strides for a shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

// An owning, contiguous tensor (CPU memory, or device memory through the backend).
class Tensor {
 public:
  Tensor() = default;
  // CPU memory is 64-byte aligned; device memory comes from the device's backend
  // (BackendUnavailable when it cannot run here).
  static Tensor empty(std::vector<int64_t> shape, DType dtype, Device device = {});
  // A contiguous copy on `device` (this tensor must be contiguous).
  Tensor to(Device device) const;
  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  void* data() const { return view_.data; }
  template <class T> T* data_as() const { return static_cast<T*>(view_.data); }
  const std::vector<int64_t>& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const;
  explicit operator bool() const { return view_.data != nullptr; }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Waits until the device has finished all work launched on it (GPU ops are asynchronous on
// the legacy default stream). A no-op for the CPU.
void synchronize(Device d);

}  // namespace ejk
