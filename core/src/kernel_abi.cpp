#include "ejk/core/kernel_abi.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace ejk {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

void mix(uint64_t& h, std::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnvPrime;
}

// The length first, so that ("ab", "c") and ("a", "bc") hash differently.
void mix_prefixed(uint64_t& h, std::string_view part) {
  mix(h, fmt::format("{}:", part.size()));
  mix(h, part);
}

}  // namespace

std::string kernel_abi_fingerprint(std::string_view generator_version, std::vector<NamedText> files) {
  std::sort(files.begin(), files.end(), [](const NamedText& a, const NamedText& b) { return a.path < b.path; });
  uint64_t h = kFnvOffset;
  for (const NamedText& f : files) {
    mix_prefixed(h, f.path);
    mix_prefixed(h, f.text);
  }
  return fmt::format("{}-{:016x}", generator_version, h);
}

}  // namespace ejk
