// The packed sequences of `ejk run state_space_v1/v2 --varlen`: offsets cut at random points.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace ejk::cli {

// n + 1 offsets of n sequences of `total` tokens, cut at random points; with two or more, one
// is empty, as packed batches of a dataloader sometimes are.
inline std::vector<int32_t> ssm_random_offsets(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int32_t> cu{0, int32_t(total)};
  for (int64_t i = 1; i < n; ++i) cu.push_back(int32_t(std::uniform_int_distribution<int64_t>(0, total)(rng)));
  std::sort(cu.begin(), cu.end());
  if (n >= 2) {
    const auto k = size_t(std::uniform_int_distribution<int64_t>(0, n - 2)(rng));
    cu[k + 1] = cu[k];
  }
  return cu;
}

}  // namespace ejk::cli
