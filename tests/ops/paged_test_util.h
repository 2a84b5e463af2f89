// Shared by the paged attention op tests (page, decode, ragged v2, multi-latent ragged): padded
// random inputs, buffers moved to a device with their view's offset kept, the reference
// against the dense softmax, and a poisoned output against the reference.
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
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

// A ragged batch's metadata over q_lens.size() sequences and `spare_rows` table rows past them
// (length 3, no tokens): query start offsets, kv lengths (the first shorter than a page where it
// can be, the last full) and tables of `mb` pages per row, distinct shuffled pages of a pool of
// rows * mb + 2 where a query reaches (this call's tokens' pages included), garbage elsewhere.
struct RaggedMetadata {
  Tensor lens, starts, tables;
};
inline RaggedMetadata ragged_metadata(const std::vector<int64_t>& q_lens, int64_t spare_rows, int64_t ps, int64_t mb,
                                      int64_t window, const Dims& table_shape, std::mt19937_64& rng) {
  const int64_t n = int64_t(q_lens.size()), rows = n + spare_rows;
  RaggedMetadata m{Tensor::empty({rows}, DType::i32), Tensor::empty({rows + 1}, DType::i32),
                   Tensor::empty(table_shape, DType::i32)};
  auto* len = m.lens.data_as<int32_t>();
  auto* qs = m.starts.data_as<int32_t>();
  qs[0] = 0;
  for (int64_t s = 0; s < rows; ++s) {
    const int64_t q = s < n ? q_lens[size_t(s)] : 0;
    qs[s + 1] = qs[s] + int32_t(q);
    const int64_t hi = s == 0 ? std::max(q, ps - 1) : mb * ps;
    len[s] = s >= n ? 3 : s == n - 1 ? int32_t(mb * ps) : int32_t(std::uniform_int_distribution<int64_t>(q, hi)(rng));
  }
  std::vector<int32_t> pages(static_cast<size_t>(rows * mb + 2));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  for (int64_t s = 0; s < rows; ++s) {
    const int64_t q = s < n ? q_lens[size_t(s)] : 0;
    const int64_t first = window > 0 ? std::max<int64_t>(0, len[s] - q - window + 1) : 0;
    for (int64_t j = 0; j < mb; ++j) {
      const bool reached = s < n && q > 0 && j * ps < len[s] && (j + 1) * ps > first;
      m.tables.data_as<int32_t>()[s * mb + j] = reached ? pages[size_t(s * mb + j)] : -5 - int32_t(j);
    }
  }
  return m;
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
