// ejk_register_cpu_variants: the C entry point through which a program's generated registration
// file hands libejk the CPU variants compiled into it (runtime/src/registry.cpp keeps them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/core/registry_data.h"
#include "ejk/ejk.h"
#include "registry.h"

extern "C" int ejk_register_cpu_variants(const char* kernel_abi, const ejk_cpu_variant* variants, size_t n) {
  return ejk::capi::guarded([&] {
    if (kernel_abi == nullptr) throw ejk::InvalidArgument("ejk_register_cpu_variants: kernel_abi is NULL");
    if (variants == nullptr && n > 0) throw ejk::InvalidArgument("ejk_register_cpu_variants: variants is NULL");
    // A program registers its generated variants: thousands at most, never a count this large.
    constexpr size_t kMaxVariants = size_t{1} << 20;
    if (n > kMaxVariants)
      throw ejk::InvalidArgument(fmt::format("ejk_register_cpu_variants: n = {} variants (at most {})", n, kMaxVariants));
    std::vector<ejk::generated::CpuAotEntry> entries;
    entries.reserve(n);
    for (size_t i = 0; i < n; ++i) entries.push_back({variants[i].key, variants[i].fn});
    const std::vector<std::string> refused = ejk::detail::register_cpu_variants(kernel_abi, entries);
    if (!refused.empty())
      throw ejk::InvalidArgument(fmt::format("ejk_register_cpu_variants: refused {}", fmt::join(refused, "; ")));
  });
}
