// Shared by the flash attention op tests: run a case on the CPU backend and measure its error
// against the float64 reference, with poisoned outputs.
#pragma once
#include <cmath>
#include <string>

#include "ejk/ops/flash_attention.h"
#include "flash_problem.h"

namespace ejk::test {

struct CaseResult {
  std::string key;
  VariantSource source = VariantSource::aot;
  double rel_l2 = 0, max_abs = 0, lse_max_abs = 0;
  bool nan = false, lse_inf_mismatch = false;
};

// Host out (like q) and lse ([B, Hq, Sq], varlen [1, Hq, total_q]) for a case, poisoned with
// NaN bytes: every element must be written by the kernel.
struct CaseOutputs {
  Tensor out, lse;
};
inline CaseOutputs poisoned_outputs(const test::FlashCase& c) {
  std::vector<int64_t> lse_shape = c.cum_seqlens_q
      ? std::vector<int64_t>{1, c.spec.hq, c.spec.sq} : std::vector<int64_t>{c.spec.b, c.spec.hq, c.spec.sq};
  CaseOutputs o{Tensor::empty(c.q.shape(), c.q.dtype()), Tensor::empty(lse_shape, DType::f32)};
  std::fill_n(static_cast<unsigned char*>(o.out.data()), o.out.nbytes(), 0xff);
  std::fill_n(static_cast<unsigned char*>(o.lse.data()), o.lse.nbytes(), 0xff);
  return o;
}

inline CaseResult run_and_compare(const test::FlashCase& c, FlashAttentionOptions opt) {
  FlashAttentionInputs in = c.inputs();
  auto [out, lse] = poisoned_outputs(c);
  RunInfo info = flash_attention_into(in, opt, out.view(), lse.view());
  FlashAttentionReference ref = flash_attention_reference(in, opt);

  CaseResult r;
  r.key = info.key;
  r.source = info.source;
  Tensor o = test::to_f32(out);
  double num = 0, den = 0;
  for (int64_t i = 0; i < o.numel(); ++i) {
    double x = o.data_as<float>()[i], y = ref.out[i];
    if (std::isnan(x)) r.nan = true;
    num += (x - y) * (x - y);
    den += y * y;
    r.max_abs = std::max(r.max_abs, std::abs(x - y));
  }
  r.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (int64_t i = 0; i < lse.numel(); ++i) {
    double x = lse.data_as<float>()[i], y = ref.lse[i];
    if (std::isnan(x)) r.nan = true;
    else if (std::isinf(x) != std::isinf(y) || (std::isinf(y) && x != y)) r.lse_inf_mismatch = true;
    else if (!std::isinf(y)) r.lse_max_abs = std::max(r.lse_max_abs, std::abs(x - y));
  }
  return r;
}

inline double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }

}  // namespace ejk::test
