// Host conversions between float and the 16-bit float formats (bit patterns in uint16_t).
// Round-to-nearest-even, NaN preserved, as the kernels store their outputs.
#pragma once
#include <cstdint>
#include <cstring>

namespace ejk {

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
    u = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: scale into the 10-bit mantissa
    float a;
    std::memcpy(&a, &abs, 4);
    // a * 2^24 rounded to nearest even (the FPU rounds the conversion).
    float scaled = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(__builtin_nearbyintf(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t mant_rounded = abs + 0x0fffu + ((abs >> 13) & 1u);  // RNE at bit 13
  return static_cast<uint16_t>(sign | ((mant_rounded - 0x38000000u) >> 13));
}

}  // namespace ejk
