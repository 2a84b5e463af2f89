// SIMD vectors of the CPU kernels as GCC/Clang vector extensions (no intrinsics headers: the
// JIT would pay for parsing them). The width follows the ISA the text is compiled for, so one
// source serves AVX-512, AVX2 and baseline x86-64 builds.
#pragma once
#include "ejk/kernels/common/base.h"

namespace ejk::cpu {

#if defined(__AVX512F__)
inline constexpr int kVecWidth = 16;      // floats per vector
inline constexpr int kVecRegisters = 32;  // architectural vector registers
#elif defined(__AVX2__)
inline constexpr int kVecWidth = 8;
inline constexpr int kVecRegisters = 16;
#else
inline constexpr int kVecWidth = 4;
inline constexpr int kVecRegisters = 16;
#endif

typedef float vf __attribute__((vector_size(4 * kVecWidth)));
typedef int vi __attribute__((vector_size(4 * kVecWidth)));
typedef unsigned vu __attribute__((vector_size(4 * kVecWidth)));
typedef unsigned short vu16 __attribute__((vector_size(2 * kVecWidth)));
typedef _Float16 vh __attribute__((vector_size(2 * kVecWidth)));

// Integer vector of the same shape as a float type: the type of comparisons and bit tricks.
template <class F> struct IntOf;
template <> struct IntOf<float> { using type = int; };
template <> struct IntOf<vf> { using type = vi; };

// A float or a vector of floats filled with c; lets math.h spell one formula for both.
// c - 0 rather than 0 + c: the former is exact for every c (-0 included), so compilers fold
// it to a plain broadcast; 0 + c would cost an addition.
template <class F> EJK_HD F splat(float c) { return c - F{}; }

// Unaligned loads and stores: memcpy is how both compilers spell "unaligned vector move".
EJK_HD vf vload(const float* p) {
  vf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
EJK_HD void vstore(float* p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

// Loads n < kVecWidth floats and zero-fills the rest (tails of rows; never reads past p[n-1]).
EJK_HD vf vload_partial(const float* p, int n) {
  vf v = vf{};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}

EJK_HD vf vmax(vf a, vf b) { return a > b ? a : b; }

// {0, 1, ..., kVecWidth - 1}: lane positions for masks built from key indices.
EJK_HD vi lane_index() {
  vi v;
#pragma GCC unroll 16
  for (int i = 0; i < kVecWidth; ++i) v[i] = i;
  return v;
}

EJK_HD float reduce_max(vf v) {
  float m = v[0];
#pragma GCC unroll 16
  for (int i = 1; i < kVecWidth; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

EJK_HD float reduce_add(vf v) {
  // Pairwise halving keeps the rounding error at log2(width) additions.
#pragma GCC unroll 16
  for (int half = kVecWidth / 2; half >= 1; half /= 2)
#pragma GCC unroll 16
    for (int i = 0; i < half; ++i) v[i] += v[i + half];
  return v[0];
}

// a . b over D floats: vectors, then the scalar tail.
template <int D> EJK_HD float row_dot(const float* a, const float* b) {
  vf acc = splat<vf>(0.0f);
  int d = 0;
  for (; d + kVecWidth <= D; d += kVecWidth) acc += vload(a + d) * vload(b + d);
  float s = reduce_add(acc);
  for (; d < D; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace ejk::cpu
