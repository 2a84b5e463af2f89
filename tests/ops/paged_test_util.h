// Shared by the paged attention op tests (page, decode, ragged v2, multi-latent ragged): padded
// random inputs, buffers moved to a device with their view's offset kept, the reference
// against the dense softmax, and a poisoned output against the reference.
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "recurrent_problem.h"

namespace paged_test {

using namespace ejk;
using recurrent_test::Buffer;

// A row-major tensor of `shape` whose last dim is `pad` elements longer than it shows.
inline Buffer padded(const Dims& shape, DType dtype, int64_t pad, std::mt19937_64& rng) {
  Dims full = shape;
  full[full.size() - 1] += pad;
  Buffer b;
  b.storage = Tensor::empty(full, dtype);
  cli::fill_normal(b.storage, rng);
  b.view = {b.storage.data(), dtype, {}, shape, contiguous_strides(full)};
  return b;
}

// b's storage copied to `device`, its view pointing at the same offset there.
inline void move_to(Buffer& b, Device device) {
  const Tensor there = b.storage.to(device);
  b.view.device = device;
  b.view.data = static_cast<char*>(there.data()) +
                (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
  b.storage = there;
}

// rel-L2 of got against want; a non-finite want (an empty row's -inf lse) must be met exactly,
// else the result is infinite, so a NaN in either never passes.
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The op's single float64 reference output, itself checked against a dense softmax written
// from scratch (`dense`): the two must agree to rounding.
inline std::vector<double> checked_reference(const std::string& op, const Args& args,
                                             const std::vector<double>& dense) {
  const std::vector<ReferenceOutput> ref = reference(op, args);
  REQUIRE(ref.size() == 1);
  CHECK(rel_l2(ref[0].values, dense) <= 1e-12);
  return ref[0].values;
}

// The op's output (its poisoned buffer `host_out`, `got` a host copy of what the run wrote)
// against the reference: finite, within the dtype's tolerance, fences untouched.
inline void check_output(const Buffer& host_out, const Tensor& got, const std::vector<double>& ref, DType dtype,
                         const std::string& label) {
  const recurrent_test::Mismatch e = recurrent_test::compare(host_out, got, ref);
  INFO(fmt::format("{}: rel_l2 {:.3e}", label, e.rel_l2));
  CHECK_FALSE(e.nonfinite);
  CHECK(e.rel_l2 <= recurrent_test::tolerance(dtype, false));
  CHECK(e.fence_intact);
}

}  // namespace paged_test
