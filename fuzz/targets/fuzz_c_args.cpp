// Fuzz target: what the C ABI reads from a caller's structs before any op sees them
// (runtime/src/api/c_args.cpp): an ejk_arg array (names, kinds, tensor descriptors with any
// dtype, device, rank, shape and strides) and a versioned struct with any struct_size. The
// bytes choose every field; every pointer points at memory of the size the ABI promises (shape
// and strides arrays of 8, a whole ejk_context), so only the library's checks decide.
// InvalidArgument is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "api/c_support.h"
#include "ejk/core/error.h"

namespace {

struct Bytes {
  const uint8_t* p;
  size_t n;
  template <class T> T take() {
    T v{};
    const size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k, n -= k;
    return v;
  }
};

const char* const kNames[] = {"q", "k", "v", "out", "lse", "causal", "softmax_scale", "sliding_window", "block_q", ""};

struct Arrays {  // what one tensor descriptor points at
  int64_t shape[8], strides[8];
  ejk_tensor t;
};

void read_args(Bytes& in) {
  const int32_t n = int8_t(in.take<uint8_t>()) % 12;  // negative counts too
  std::vector<ejk_arg> args(size_t(n > 0 ? n : 0));
  std::vector<Arrays> tensors(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const uint8_t name = in.take<uint8_t>();
    args[i].name = name == 0xff ? nullptr : kNames[name % (sizeof(kNames) / sizeof(kNames[0]))];
    args[i].kind = int8_t(in.take<uint8_t>()) % 8;
    args[i].ints[0] = in.take<int64_t>(), args[i].ints[1] = in.take<int64_t>();
    args[i].real = in.take<double>();
    Arrays& a = tensors[i];
    a.t.data = in.take<uint8_t>() & 1 ? a.shape : nullptr;
    a.t.dtype = int8_t(in.take<uint8_t>());
    a.t.device_kind = int8_t(in.take<uint8_t>());
    a.t.device_index = int8_t(in.take<uint8_t>());
    a.t.rank = int8_t(in.take<uint8_t>()) % 11;
    for (int d = 0; d < 8; ++d) a.shape[d] = in.take<int16_t>() > 0 ? in.take<uint8_t>() : in.take<int64_t>();
    for (int d = 0; d < 8; ++d) a.strides[d] = in.take<int64_t>();
    const uint8_t arrays = in.take<uint8_t>();
    a.t.shape = arrays & 1 ? a.shape : nullptr;
    a.t.strides = arrays & 2 ? a.strides : nullptr;
    args[i].tensor = arrays & 4 ? nullptr : &a.t;
  }
  const bool no_array = n != 0 && (in.take<uint8_t>() & 1);
  const ejk::Args got = ejk::capi::to_args(no_array ? nullptr : args.data(), n, "fuzz");
  for (const auto& [name, view] : got.tensors()) {
    (void)view.numel();  // InvalidArgument when the product overflows
    (void)view.describe();
    (void)view.is_contiguous();
  }
}

void read_context(Bytes& in) {
  ejk_context given;
  std::memset(&given, 0, sizeof(given));
  given.struct_size = in.take<uint32_t>();
  ejk_context out{};
  out.struct_size = sizeof(out);
  ejk::capi::read_versioned(&given, &out, sizeof(out), "ejk_context", {sizeof(uint32_t) + sizeof(int32_t)});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  try {
    read_context(in);
  } catch (const ejk::InvalidArgument&) {
  }
  try {
    read_args(in);
  } catch (const ejk::InvalidArgument&) {
  }
  return 0;
}
