// Random packed lengths and their longest sequence, for the flash attention forward and backward
// CLI cases (both take the same problem options).
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ejk/tensor.h"

namespace ejk::cli::flash_inputs {

// Random cut points: n lengths summing to total, each >= 1 when total >= n.
inline std::vector<int32_t> random_cum(int64_t n, int64_t total, std::mt19937_64& rng) {
  const int64_t slack = total >= n ? total - n : total, base = total >= n ? 1 : 0;
  std::uniform_int_distribution<int64_t> u(0, slack);
  std::vector<int64_t> cuts;
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(u(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cum{0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hi = i + 1 < n ? cuts[i] : slack, lo = i == 0 ? 0 : cuts[i - 1];
    cum.push_back(int32_t(cum.back() + (hi - lo) + base));
  }
  return cum;
}

// The offsets were checked by the op (i32, non-decreasing) before this reads them.
inline int64_t longest(const Tensor& cum) {
  const auto* c = cum.data_as<int32_t>();
  int64_t m = 0;
  for (int64_t i = 1; i < cum.numel(); ++i) m = std::max<int64_t>(m, int64_t(c[i]) - int64_t(c[i - 1]));
  return m;
}

}  // namespace ejk::cli::flash_inputs
