// Paged-cache metadata for the paged attention CLI cases: shuffled page tables, and the ragged
// cases' query start offsets and kv lengths over sequences plus spare table rows.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ejk/tensor.h"

namespace ejk::cli::paged_inputs {

// t's entries: the first t.numel() of the pages [0, pool) shuffled, so every page is distinct
// and pool - numel spare pages are never read.
inline void fill_shuffled_pages(Tensor& t, int64_t pool, std::mt19937_64& rng) {
  std::vector<int32_t> pages(static_cast<size_t>(pool));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::copy_n(pages.begin(), size_t(t.numel()), t.data_as<int32_t>());
}

// query_start_loc over `rows` table rows: sequence s < n has q_len(s) tokens, spare rows none.
inline void fill_query_starts(Tensor& t, int64_t n, int64_t rows, const std::function<int64_t(int64_t)>& q_len) {
  auto* qs = t.data_as<int32_t>();
  qs[0] = 0;
  for (int64_t s = 0; s < rows; ++s) qs[s + 1] = qs[s] + int32_t(s < n ? q_len(s) : 0);
}

// kv lengths random in [q_len(s), context] (the last sequence at context), spare rows 0.
inline void fill_kv_lens(Tensor& t, int64_t n, int64_t rows, int64_t context,
                         const std::function<int64_t(int64_t)>& q_len, std::mt19937_64& rng) {
  auto* len = t.data_as<int32_t>();
  for (int64_t s = 0; s < rows; ++s)
    len[s] = s < n ? int32_t(std::uniform_int_distribution<int64_t>(q_len(s), context)(rng)) : 0;
  if (n > 0) len[n - 1] = int32_t(context);
}

// The ragged cases' shared metadata by input name (query_start_loc, `lens_name`, block_tables);
// false for any other input.
inline bool fill_ragged(const std::string& name, const std::string& lens_name, Tensor& t, int64_t n, int64_t rows,
                        int64_t context, const std::function<int64_t(int64_t)>& q_len, std::mt19937_64& rng) {
  if (name == "query_start_loc") fill_query_starts(t, n, rows, q_len);
  else if (name == lens_name) fill_kv_lens(t, n, rows, context, q_len, rng);
  else if (name == "block_tables") fill_shuffled_pages(t, t.numel(), rng);
  else return false;
  return true;
}

}  // namespace ejk::cli::paged_inputs
