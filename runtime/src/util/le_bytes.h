// Little-endian integers in byte buffers: the on-disk formats (cache entries, bundles) are
// little-endian whatever the host. Readers check bounds before calling get_*.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ejk::util {

template <class T>
void put_le(std::vector<uint8_t>& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

template <class T>
T get_le(std::span<const uint8_t> in, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>(v | static_cast<T>(in[at + i]) << (8 * i));
  return v;
}

inline void put_u16(std::vector<uint8_t>& out, uint16_t v) { put_le(out, v); }
inline void put_u32(std::vector<uint8_t>& out, uint32_t v) { put_le(out, v); }
inline void put_u64(std::vector<uint8_t>& out, uint64_t v) { put_le(out, v); }
inline uint16_t get_u16(std::span<const uint8_t> in, size_t at) { return get_le<uint16_t>(in, at); }
inline uint32_t get_u32(std::span<const uint8_t> in, size_t at) { return get_le<uint32_t>(in, at); }
inline uint64_t get_u64(std::span<const uint8_t> in, size_t at) { return get_le<uint64_t>(in, at); }

}  // namespace ejk::util
