#include "engine/metadata.h"

#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"

namespace ejk::engine {

int64_t check_offsets(std::string_view op, std::string_view arg, const TensorView& offsets, int64_t total) {
  auto bad = [&](const std::string& what) { return InvalidArgument(fmt::format("{}: {}: {}", op, arg, what)); };
  const auto* cu = static_cast<const int32_t*>(offsets.data);
  const int64_t n = offsets.shape[0];
  if (cu[0] != 0) throw bad(fmt::format("must start at 0, got {}", cu[0]));
  int64_t longest = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (cu[i] < cu[i - 1])
      throw bad(fmt::format("must be non-decreasing, but entry {} ({}) < entry {} ({})", i, cu[i], i - 1, cu[i - 1]));
    longest = std::max<int64_t>(longest, cu[i] - cu[i - 1]);
  }
  if (cu[n - 1] != total) throw bad(fmt::format("last entry must equal the packed length {}, got {}", total, cu[n - 1]));
  return longest;
}

}  // namespace ejk::engine
