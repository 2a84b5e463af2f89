// Element types of the CPU kernels and their conversions to and from float32.
// bf16 and f16 travel as 16-bit patterns; arithmetic always happens in float32.
// Narrowing rounds to nearest even and keeps NaN a (quiet) NaN.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

enum class ElemKind { f32, bf16, f16 };

// Storage type of one element in memory.
template <ElemKind K> struct ElemStorage { using type = u16; };
template <> struct ElemStorage<ElemKind::f32> { using type = float; };
template <ElemKind K> using Elem = typename ElemStorage<K>::type;

// ---- scalars ----

EJK_HD float bf16_to_f32(u16 bits) { return __builtin_bit_cast(float, (u32)bits << 16); }

EJK_HD u16 f32_to_bf16(float x) {
  u32 u = __builtin_bit_cast(u32, x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);  // quiet the NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties go to the even bf16
  return (u16)(u >> 16);
}

EJK_HD float f16_to_f32(u16 bits) { return (float)__builtin_bit_cast(_Float16, bits); }
EJK_HD u16 f32_to_f16(float x) { return __builtin_bit_cast(u16, (_Float16)x); }

template <ElemKind K> EJK_HD float to_f32(Elem<K> x) {
  if constexpr (K == ElemKind::f32) return x;
  else if constexpr (K == ElemKind::bf16) return bf16_to_f32(x);
  else return f16_to_f32(x);
}

template <ElemKind K> EJK_HD Elem<K> from_f32(float x) {
  if constexpr (K == ElemKind::f32) return x;
  else if constexpr (K == ElemKind::bf16) return f32_to_bf16(x);
  else return f32_to_f16(x);
}

// ---- vectors of kVecWidth elements ----

template <ElemKind K> EJK_HD vf load_f32(const Elem<K>* p) {
  if constexpr (K == ElemKind::f32) {
    return vload(p);
  } else if constexpr (K == ElemKind::bf16) {
    vu16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_bit_cast(vf, __builtin_convertvector(h, vu) << 16);
  } else {
    vh h;
    __builtin_memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, vf);
  }
}

EJK_HD vu16 f32_to_bf16(vf x) {
  vu u = __builtin_bit_cast(vu, x);
  vu rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  vu quiet_nan = (u >> 16) | 0x40u;
  vu out = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  return __builtin_convertvector(out, vu16);
}

template <ElemKind K> EJK_HD void store_from_f32(Elem<K>* p, vf x) {
  if constexpr (K == ElemKind::f32) {
    vstore(p, x);
  } else if constexpr (K == ElemKind::bf16) {
    vu16 h = f32_to_bf16(x);
    __builtin_memcpy(p, &h, sizeof h);
  } else {
    vh h = __builtin_convertvector(x, vh);
    __builtin_memcpy(p, &h, sizeof h);
  }
}

// Converts n contiguous elements to float32 (any n: whole vectors, then a scalar tail).
template <ElemKind K> EJK_HD void convert_row(const Elem<K>* src, float* dst, int n) {
  int i = 0;
  for (; i + kVecWidth <= n; i += kVecWidth) vstore(dst + i, load_f32<K>(src + i));
  for (; i < n; ++i) dst[i] = to_f32<K>(src[i]);
}

}  // namespace ejk::cpu
