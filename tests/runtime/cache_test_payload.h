// The payload the multi-process cache test builds: derived from the hash only, so the test
// and every worker agree on it without talking to each other.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ejk::test {

inline std::vector<uint8_t> payload_for_hash(const std::string& hash_hex, size_t size) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (char c : hash_hex) state = state * 131 + static_cast<unsigned char>(c);
  std::vector<uint8_t> out(size);
  for (auto& b : out) {  // splitmix64
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    b = static_cast<uint8_t>(z ^ (z >> 31));
  }
  return out;
}

}  // namespace ejk::test
