// Freestanding basics shared by every kernel header.
// No standard headers on purpose: the same text compiles under g++ (AOT), clang through the
// ORC JIT, nvcc, NVRTC and HIPRTC, and parsing libstdc++ would dominate CPU JIT latency.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__)
#define EJK_GPU_COMPILE 1
#define EJK_HD __host__ __device__ __forceinline__
#else
#define EJK_GPU_COMPILE 0
#define EJK_HD inline __attribute__((always_inline))
#endif

namespace ejk {
using i32 = int;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;
using u16 = unsigned short;

// Larger than any sequence length, small enough that q +/- kUnbounded cannot overflow.
constexpr i64 kUnbounded = (i64)1 << 60;

template <class T> EJK_HD T min_of(T a, T b) { return a < b ? a : b; }
template <class T> EJK_HD T max_of(T a, T b) { return a < b ? b : a; }
template <class T> EJK_HD constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

// Tokens [begin, end) of sequence s: dense (cu_seqlens null) s * seqlen onwards, else packed
// from cu_seqlens clamped into [0, total], so a malformed cu_seqlens on the device (the host
// never reads it) gives wrong results but never a read or write outside the tensors.
struct TokenSpan {
  i64 begin, end;
};
EJK_HD TokenSpan token_span(const i32* cu_seqlens, i64 seqlen, i64 total, i64 s) {
  if (cu_seqlens == nullptr) return {s * seqlen, (s + 1) * seqlen};
  const i64 b = min_of(max_of((i64)cu_seqlens[s], (i64)0), total);
  return {b, min_of(max_of((i64)cu_seqlens[s + 1], b), total)};
}

// Bit patterns instead of INFINITY/NAN macros: math.h is not available under NVRTC. The
// device spelling only in device passes: nvcc's host pass of a .cu file compiles this too.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
EJK_HD float neg_inf_f32() { return __int_as_float(0xff800000); }
#else
EJK_HD float neg_inf_f32() { return __builtin_bit_cast(float, 0xff800000u); }
#endif
}  // namespace ejk
