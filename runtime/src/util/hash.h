// Content hashes for cache keys and integrity checks (xxHash XXH3).
// Not cryptographic: they detect corruption and tell variants apart; they do not resist an
// attacker who can write the cache directory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace ejk::util {

// 64-bit XXH3 of a byte range (payload checksums).
uint64_t xxh3_64(std::span<const uint8_t> bytes);
uint64_t xxh3_64(std::span<const uint8_t> bytes, uint64_t seed);

// 128-bit XXH3 of a byte range as 32 lowercase hex characters.
std::string xxh3_128_hex(std::span<const uint8_t> bytes);

// 128-bit XXH3 over a list of strings, each preceded by its length as 8 little-endian bytes,
// so {"ab", "c"} and {"a", "bc"} hash differently. 32 lowercase hex characters. This is the
// helper callers use to build a variant's cache hash from everything that determines it
// (source text, headers, compiler identity, flags).
std::string hash_strings_hex(std::span<const std::string_view> parts);
std::string hash_strings_hex(std::initializer_list<std::string_view> parts);

// Lowercase hex of a 64-bit value, 16 characters, most significant nibble first.
std::string hex64(uint64_t value);

// True when `text` is non-empty and only [0-9a-f].
bool is_lower_hex(std::string_view text);

}  // namespace ejk::util
