#include "util/hash.h"

// Inline xxHash so no shared library is needed at run time (the GPU machine lacks libxxhash).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ejk::util {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

void append_hex(std::string& out, const unsigned char* bytes, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHexDigits[bytes[i] >> 4]);
    out.push_back(kHexDigits[bytes[i] & 0xf]);
  }
}

std::string canonical_hex(XXH128_hash_t hash) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);
  std::string out;
  out.reserve(32);
  append_hex(out, canonical.digest, sizeof(canonical.digest));
  return out;
}

// The length prefix is fixed little-endian so the hash does not depend on the host.
void update_length_prefixed(XXH3_state_t* state, std::string_view part) {
  unsigned char length[8];
  uint64_t n = part.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  XXH3_128bits_update(state, length, sizeof(length));
  XXH3_128bits_update(state, part.data(), part.size());
}

}  // namespace

uint64_t xxh3_64(std::span<const uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

uint64_t xxh3_64(std::span<const uint8_t> bytes, uint64_t seed) {
  return XXH3_64bits_withSeed(bytes.data(), bytes.size(), seed);
}

std::string xxh3_128_hex(std::span<const uint8_t> bytes) {
  return canonical_hex(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string hash_strings_hex(std::span<const std::string_view> parts) {
  // A stack state: XXH3_createState would heap-allocate for no benefit.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);
  for (std::string_view part : parts) update_length_prefixed(&state, part);
  return canonical_hex(XXH3_128bits_digest(&state));
}

std::string hash_strings_hex(std::initializer_list<std::string_view> parts) {
  return hash_strings_hex(std::span<const std::string_view>(parts.begin(), parts.size()));
}

std::string hex64(uint64_t value) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[i] = kHexDigits[value & 0xf];
  return out;
}

bool is_lower_hex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    bool digit = c >= '0' && c <= '9';
    bool letter = c >= 'a' && c <= 'f';
    if (!digit && !letter) return false;
  }
  return true;
}

}  // namespace ejk::util
