// The C ABI's argument readers (api/c_support.h): tensor descriptors to views, argument arrays to
// Args, versioned structs. Every field a caller fills is checked here; nothing else of the
// library is needed, so fuzz/targets/fuzz_c_args.cpp exercises exactly this.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "api/c_support.h"
#include "ejk/core/error.h"

namespace ejk::capi {

TensorView to_view(const ejk_tensor& t, const char* name) {
  if (t.rank < 0 || t.rank > Dims::kMaxRank || (t.rank > 0 && !t.shape))
    throw InvalidArgument(fmt::format("{}: rank must be 0..{} with a shape array, got {}", name, int(Dims::kMaxRank), t.rank));
  if (t.dtype < EJK_F32 || t.dtype > EJK_U8) throw InvalidArgument(fmt::format("{}: unknown dtype code {}", name, t.dtype));
  if (t.device_kind < EJK_DEVICE_CPU || t.device_kind > EJK_DEVICE_HIP)
    throw InvalidArgument(fmt::format("{}: unknown device kind {}", name, t.device_kind));
  if (t.device_index < 0) throw InvalidArgument(fmt::format("{}: device index must be >= 0, got {}", name, t.device_index));
  for (int32_t i = 0; i < t.rank; ++i)
    if (t.shape[i] < 0) throw InvalidArgument(fmt::format("{}: dim {} is {}; dims must be >= 0", name, i, t.shape[i]));
  TensorView v;
  v.data = t.data;
  v.dtype = static_cast<DType>(t.dtype);
  v.device = {static_cast<DeviceKind>(t.device_kind), t.device_index};
  v.shape = Dims(t.shape, t.rank);
  v.strides = t.strides ? Dims(t.strides, t.rank) : contiguous_strides(v.shape);
  return v;
}

void read_versioned(const void* in, void* out, size_t ours, const char* name, std::initializer_list<size_t> older) {
  uint32_t size = 0;
  std::memcpy(&size, in, sizeof(size));
  const bool known = size == ours || std::find(older.begin(), older.end(), size_t(size)) != older.end();
  if (!known)
    throw InvalidArgument(fmt::format("{}: struct_size {} is not the size of a version this library (ABI {}) knows "
                                      "({} bytes); call its _init function first, or upgrade libejk",
                                      name, size, EJK_ABI_VERSION, ours));
  std::memcpy(out, in, std::min<size_t>(size, ours));
}

Args to_args(const ejk_arg* args, int32_t num_args, const char* caller) {
  if (num_args < 0 || (num_args > 0 && args == nullptr))
    throw InvalidArgument(fmt::format("{}: {} arguments but no array", caller, num_args));
  Args a;
  for (int32_t i = 0; i < num_args; ++i) {
    const ejk_arg& x = args[i];
    if (x.name == nullptr) throw InvalidArgument(fmt::format("{}: argument {} has no name", caller, i));
    // Set twice, the later would silently win; a caller's mistake either way.
    const bool tuning = x.kind == EJK_ARG_TUNE;
    const bool seen = tuning ? std::any_of(a.tuning().begin(), a.tuning().end(), [&](const auto& e) { return e.first == x.name; })
                             : a.tensor(x.name) != nullptr || a.scalar(x.name) != nullptr;
    if (seen) throw InvalidArgument(fmt::format("{}: argument '{}' is given twice", caller, x.name));
    switch (x.kind) {
      case EJK_ARG_TENSOR:
        if (x.tensor == nullptr) throw InvalidArgument(fmt::format("{}: tensor argument without a tensor", x.name));
        a.set(x.name, capi::to_view(*x.tensor, x.name));
        break;
      case EJK_ARG_BOOL: a.set(x.name, Scalar(x.ints[0] != 0)); break;
      case EJK_ARG_INT: a.set(x.name, Scalar(x.ints[0])); break;
      case EJK_ARG_FLOAT: a.set(x.name, Scalar(x.real)); break;
      case EJK_ARG_INT_PAIR: a.set(x.name, Scalar(std::array<int64_t, 2>{x.ints[0], x.ints[1]})); break;
      case EJK_ARG_TUNE: a.tune(x.name, x.ints[0]); break;
      default: throw InvalidArgument(fmt::format("{}: unknown argument kind {}", x.name, x.kind));
    }
  }
  return a;
}

}  // namespace ejk::capi
