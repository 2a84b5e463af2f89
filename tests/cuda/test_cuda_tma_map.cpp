// The host's TMA view checks (runtime/src/cuda/tma_map.h): the copy engine's limits, each
// refused with an error naming the tensor. No GPU needed: the checks run before the driver.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>

#include "cuda/tma_map.h"
#include "ejk/core/error.h"

namespace ejk::cuda {
namespace {

using Catch::Matchers::ContainsSubstring;

alignas(16) unsigned char g_storage[64];

// A valid view: 128 columns x 1000 rows x 8 heads x 2 batches of 16-bit elements, packed.
TmaTensorView valid_view() {
  TmaTensorView v{};
  v.base = g_storage;
  v.dims[0] = 128, v.dims[1] = 1000, v.dims[2] = 8, v.dims[3] = 2;
  v.strides[0] = 128 * 2, v.strides[1] = 1000 * 128 * 2, v.strides[2] = 8 * 1000 * 128 * 2;
  v.box[0] = 64, v.box[1] = 128, v.box[2] = 1, v.box[3] = 1;
  return v;
}

const TensorName kQ{"flash_attention", "CUDA sm90a", "q"};

TEST_CASE("TMA views within the copy engine's limits pass the check") {
  CHECK_NOTHROW(check_tma_view(valid_view(), kQ));
}

TEST_CASE("TMA views beyond the copy engine's limits are refused, naming the tensor") {
  const std::string named = "flash_attention (CUDA sm90a): q";
  TmaTensorView v = valid_view();
  v.base = g_storage + 2;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("16-byte aligned"));
  v = valid_view();
  v.strides[0] = 100;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("multiples of 16"));
  v = valid_view();
  v.strides[2] = uint64_t(1) << 40;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("2^40"));
  v = valid_view();
  v.dims[1] = uint64_t(1) << 31;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("2^31"));
  v = valid_view();
  v.dims[3] = 0;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("empty"));
  v = valid_view();
  v.box[1] = 512;
  CHECK_THROWS_WITH(check_tma_view(v, kQ), ContainsSubstring(named) && ContainsSubstring("1 to 256"));
  CHECK_THROWS_AS(check_tma_view(v, kQ), InvalidArgument);
}

}  // namespace
}  // namespace ejk::cuda
