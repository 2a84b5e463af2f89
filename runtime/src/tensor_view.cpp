// Devices, Dims and TensorView (ejk/tensor.h): descriptions of memory, with no allocation or
// backend behind them (the C ABI's argument reader and its fuzz target use them alone).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "ejk/tensor.h"

namespace ejk {

std::string to_string(Device d) {
  switch (d.kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return fmt::format("cuda:{}", d.index);
    case DeviceKind::hip: return fmt::format("hip:{}", d.index);
  }
  return "?";
}

Dims::Dims(const int64_t* v, int64_t n) {
  if (n < 0 || n > kMaxRank)
    throw InvalidArgument(fmt::format("tensor rank {}: expected 0..{}", n, int(kMaxRank)));
  std::copy(v, v + n, v_);
  n_ = n;
}
Dims::Dims(std::initializer_list<int64_t> v) : Dims(v.begin(), static_cast<int64_t>(v.size())) {}
Dims::Dims(const std::vector<int64_t>& v) : Dims(v.data(), static_cast<int64_t>(v.size())) {}

void Dims::push_back(int64_t x) {
  if (n_ == kMaxRank) throw InvalidArgument(fmt::format("tensor rank: at most {}", int(kMaxRank)));
  v_[n_++] = x;
}

bool Dims::operator==(const Dims& o) const { return n_ == o.n_ && std::equal(begin(), end(), o.begin()); }

std::string to_string(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape)
    if (s < 0 || __builtin_mul_overflow(n, s, &n))
      throw InvalidArgument(fmt::format("tensor of shape {}: {}", to_string(shape),
                                        s < 0 ? "negative dimension" : "element count overflows int64"));
  return n;
}

bool TensorView::is_contiguous() const { return strides == contiguous_strides(shape); }

std::string TensorView::describe() const {
  return fmt::format("{}{} on {}", dtype_name(dtype), to_string(shape), to_string(device));
}

Dims contiguous_strides(const Dims& shape) {
  Dims st = shape;
  int64_t s = 1;
  for (int64_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    if (shape[i] < 0 || __builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s))
      throw InvalidArgument(fmt::format("tensor of shape {}: strides overflow int64", to_string(shape)));
  }
  return st;
}

}  // namespace ejk
