// Branch-free exp and tanh for float and for vf (same formula, one template), accurate to a
// few ulp, for the softmax and the softcap. No libm: the JIT must not parse <cmath>, and a
// call per element would stop vectorization.
// Polynomial coefficients are our own minimax fits (weighted least squares refined by Lawson
// iterations in float64), rounded to float32.
#pragma once
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/cpu/vec.h"

namespace ejk::cpu {

// Below this exp returns exactly 0: exp(-87) is still a normal float, so the result is never
// subnormal (subnormals trap into microcode on some CPUs) and masked logits (-inf) give 0.
inline constexpr float kExpZeroBelow = -87.0f;
// Clamp for large arguments (exp(88) < FLT_MAX): callers only pass x <= 0 or bounded values.
inline constexpr float kExpMaxArg = 88.0f;

// e^x for x in [kExpZeroBelow, kExpMaxArg], 0 below, e^88 above, NaN for NaN.
// x = n*ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by a degree-6 polynomial,
// 2^n assembled in the exponent field.
template <class F> EJK_HD F exp_approx(F x) {
  using I = typename IntOf<F>::type;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;       // 16 significant bits: n*kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln2 - kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;         // 1.5 * 2^23: adding it rounds to integer
  // Comparisons written so that NaN fails them and flows through unchanged.
  F xc = x < splat<F>(kExpZeroBelow) ? splat<F>(kExpZeroBelow) : x;
  xc = xc > splat<F>(kExpMaxArg) ? splat<F>(kExpMaxArg) : xc;
  F t = xc * kLog2e + kRoundMagic;
  F n = t - kRoundMagic;
  F r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  // e^r = 1 + r + r^2 * P(r)
  F p = splat<F>(1.38796854e-3f);
  p = p * r + 8.36869422e-3f;
  p = p * r + 4.16672267e-2f;
  p = p * r + 1.66665211e-1f;
  p = p * r + 4.99999970e-1f;
  F er = (p * (r * r) + r) + 1.0f;
  // The low mantissa bits of t hold n (biased by the magic's own bits).
  I n_int = __builtin_bit_cast(I, t) - __builtin_bit_cast(int, kRoundMagic);
  F two_n = __builtin_bit_cast(F, (n_int + 127) << 23);
  F result = er * two_n;
  return x < splat<F>(kExpZeroBelow) ? splat<F>(0.0f) : result;
}

#if defined(__AVX512F__)
// Pieces of the AVX-512 exps below: n = round(x * log2(e)) with vrndscaleps, and the result
// er * 2^n with vscalefps, forced to 0 where the argument x was below kExpZeroBelow.
EJK_HD vf round_log2e_times(vf x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr int kRoundNearest = 0x08;  // imm8: round to nearest even, suppress exceptions
  constexpr int kCurrentRounding = 4;
  return __builtin_ia32_rndscaleps_mask(x * kLog2e, kRoundNearest, x, (unsigned short)0xffff,
                                        kCurrentRounding);
}
EJK_HD vf scale_exp_result(vf er, vf n, vf x) {
  constexpr int kCurrentRounding = 4;
  const vf result = __builtin_ia32_scalefps512_mask(er, n, er, (unsigned short)0xffff, kCurrentRounding);
  return x < splat<vf>(kExpZeroBelow) ? splat<vf>(0.0f) : result;
}

// The same e^x with AVX-512's own rounding and 2^n scaling: four instructions fewer per
// vector, and the softmax calls this once per score.
template <> EJK_HD vf exp_approx<vf>(vf x) {
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  vf xc = x < splat<vf>(kExpZeroBelow) ? splat<vf>(kExpZeroBelow) : x;
  xc = xc > splat<vf>(kExpMaxArg) ? splat<vf>(kExpMaxArg) : xc;
  const vf n = round_log2e_times(xc);
  vf r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  vf p = splat<vf>(1.38796854e-3f);
  p = p * r + 8.36869422e-3f;
  p = p * r + 4.16672267e-2f;
  p = p * r + 1.66665211e-1f;
  p = p * r + 4.99999970e-1f;
  const vf er = (p * (r * r) + r) + 1.0f;
  return scale_exp_result(er, n, x);
}

// e^x to ~1e-5 (degree-4 polynomial, one-constant ln2), for probabilities that are rounded to
// bf16 next (2^-9): a third fewer instructions than exp_approx. x must be <= kExpMaxArg
// (softmax arguments are); 0 below kExpZeroBelow and for -inf, NaN stays NaN.
EJK_HD vf exp_for_bf16(vf x) {
  constexpr float kLn2 = 0.693147180559945309f;
  const vf xc = x < splat<vf>(kExpZeroBelow) ? splat<vf>(kExpZeroBelow) : x;
  const vf n = round_log2e_times(xc);
  const vf r = xc - n * kLn2;
  // e^r = 1 + r + r^2 * P(r), P of degree 2 (own fit, max relative error 6.9e-6)
  vf p = splat<vf>(4.16580960e-2f);
  p = p * r + 1.67552069e-1f;
  p = p * r + 5.00011981e-1f;
  const vf er = (p * (r * r) + r) + 1.0f;
  return scale_exp_result(er, n, x);
}
#endif

// tanh(x): odd polynomial near 0 (where 1 - 2/(e^2a + 1) would cancel), that formula beyond.
template <class F> EJK_HD F tanh_approx(F x) {
  using I = typename IntOf<F>::type;
  constexpr float kSmall = 0.625f;     // the polynomial's fitted range
  constexpr float kSaturate = 9.0f;    // tanh(9) rounds to 1 in float32
  I sign = __builtin_bit_cast(I, x) & (int)0x80000000u;
  F a = __builtin_bit_cast(F, __builtin_bit_cast(I, x) ^ sign);  // |x|
  // tanh(a) = a + a^3 * Q(a^2) on [0, kSmall]
  F y = a * a;
  F q = splat<F>(-5.71232056e-3f);
  q = q * y + 2.06462778e-2f;
  q = q * y - 5.37421741e-2f;
  q = q * y + 1.33314759e-1f;
  q = q * y - 3.33332837e-1f;
  F small = (q * y) * a + a;
  F ac = a > splat<F>(kSaturate) ? splat<F>(kSaturate) : a;
  F large = 1.0f - 2.0f / (exp_approx(ac + ac) + 1.0f);
  F magnitude = a < splat<F>(kSmall) ? small : large;
  return __builtin_bit_cast(F, __builtin_bit_cast(I, magnitude) | sign);
}

// Natural log of a positive normal float (the softmax denominator, once per row): x = 2^e * f
// with f in [sqrt(1/2), sqrt(2)), log f = 2 atanh(t), t = (f - 1) / (f + 1), |t| < 0.172, by its
// series to t^11 (truncation below 1e-10). 0 gives -inf, NaN stays NaN.
EJK_HD float log_approx(float x) {
  if (x != x) return x;
  if (x <= 0.0f) return neg_inf_f32();
  constexpr float kLn2 = 0.693147180559945309f;
  u32 bits = __builtin_bit_cast(u32, x);
  int e = (int)(bits >> 23) - 127;
  float f = __builtin_bit_cast(float, (bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (f > 1.41421356f) {
    f *= 0.5f;
    e += 1;
  }
  const float t = (f - 1.0f) / (f + 1.0f), t2 = t * t;
  float s = 1.0f / 11.0f;
  s = s * t2 + 1.0f / 9.0f;
  s = s * t2 + 1.0f / 7.0f;
  s = s * t2 + 1.0f / 5.0f;
  s = s * t2 + 1.0f / 3.0f;
  s = s * t2 + 1.0f;
  return (float)e * kLn2 + 2.0f * t * s;
}

// The functor handed to ejk::transform_logit and to the vector logit transform.
struct FastTanh {
  template <class F> EJK_HD F operator()(F x) const { return tanh_approx(x); }
};

}  // namespace ejk::cpu
