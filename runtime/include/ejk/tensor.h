// Tensor views (non-owning) and owning tensors.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ejk/dtype.h"
#include "ejk/export.h"

namespace ejk {

enum class DeviceKind : uint8_t { cpu, cuda, hip };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};
EJK_API std::string to_string(Device d);  // "cpu", "cuda:0"

// Sizes or strides of up to kMaxRank dimensions, stored inline: describing a tensor allocates
// nothing, which keeps a call's host cost in the microseconds.
class EJK_API Dims {
 public:
  static constexpr int kMaxRank = 8;
  Dims() = default;
  Dims(std::initializer_list<int64_t> v);
  Dims(const std::vector<int64_t>& v);  // NOLINT: implicit, as a std::vector would convert
  Dims(const int64_t* v, int64_t n);    // InvalidArgument past kMaxRank

  int64_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int64_t i) const { return v_[i]; }
  int64_t& operator[](int64_t i) { return v_[i]; }
  const int64_t* begin() const { return v_; }
  const int64_t* end() const { return v_ + n_; }
  int64_t* begin() { return v_; }
  int64_t* end() { return v_ + n_; }
  const int64_t* data() const { return v_; }
  int64_t front() const { return v_[0]; }
  int64_t back() const { return v_[n_ - 1]; }
  void push_back(int64_t x);  // InvalidArgument past kMaxRank
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool operator==(const Dims& o) const;

 private:
  int64_t v_[kMaxRank] = {};
  int64_t n_ = 0;
};
EJK_API std::string to_string(const Dims& d);  // "[2, 128, 16, 64]"

// A strided view of memory it does not own. Strides are in elements.
struct EJK_API TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  Dims shape;
  Dims strides;

  int64_t rank() const { return shape.size(); }
  int64_t numel() const;  // InvalidArgument when the product overflows int64
  bool is_contiguous() const;
  std::string describe() const;  // "bf16[2, 128, 16, 64] on cpu"
};

// Row-major strides for a shape (InvalidArgument when they overflow int64).
EJK_API Dims contiguous_strides(const Dims& shape);

// An owning, contiguous tensor (CPU memory, or device memory through the backend).
class EJK_API Tensor {
 public:
  Tensor() = default;
  // CPU memory is 64-byte aligned; device memory comes from the device's backend
  // (BackendUnavailable when it cannot run here). InvalidArgument for a negative dimension or
  // a size that overflows.
  static Tensor empty(const Dims& shape, DType dtype, Device device = {});
  // A contiguous copy on `device` (this tensor must be contiguous). Synchronous.
  Tensor to(Device device) const;
  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  void* data() const { return view_.data; }
  template <class T> T* data_as() const { return static_cast<T*>(view_.data); }
  const Dims& shape() const { return view_.shape; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  int64_t numel() const { return view_.numel(); }
  size_t nbytes() const;
  explicit operator bool() const { return view_.data != nullptr; }

 private:
  std::shared_ptr<void> storage_;
  TensorView view_;
};

// Waits until the device has finished all work queued on `stream` (a CUstream for CUDA; null:
// everything on the device). A no-op for the CPU.
EJK_API void synchronize(Device d, void* stream = nullptr);

}  // namespace ejk
