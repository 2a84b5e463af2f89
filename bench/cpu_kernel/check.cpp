// Correctness of the CPU flash forward kernel against the float64 reference, across features,
// dtypes, odd lengths and block shapes. Fresh random inputs every run, outputs poisoned with
// NaN; exit status 1 when any case fails.
//   usage: cpu_kernel_check [seed]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ejk/kernels/cpu/flash_fwd.h"
#include "ops/flash_attention/flash_reference.h"
#include "problem.h"

namespace ejk::bench {
namespace {

using cpu::ElemKind;
using cpu::FlashFlags;

constexpr FlashFlags kPlain{};
constexpr FlashFlags kCausal{.causal = true};
constexpr FlashFlags kWindow{.window = true};
constexpr FlashFlags kCausalWindow{.causal = true, .window = true};
constexpr FlashFlags kSoftcap{.softcap = true};
constexpr FlashFlags kSinks{.sinks = true};
constexpr FlashFlags kBias{.bias = true};
constexpr FlashFlags kBiasSoftcap{.softcap = true, .bias = true};
constexpr FlashFlags kCausalSinks{.causal = true, .sinks = true};
constexpr FlashFlags kWindowSinks{.window = true, .sinks = true};
constexpr FlashFlags kSegments{.segments = true};
constexpr FlashFlags kCausalSegments{.causal = true, .segments = true};
constexpr FlashFlags kCausalWindowSegments{.causal = true, .window = true, .segments = true};
constexpr FlashFlags kAll{.causal = true, .window = true, .segments = true, .softcap = true, .sinks = true,
                          .bias = true};

struct Case {
  Problem pb;
  TaskFn fn;
  int block_q;
  bool amx;              // the kernel runs on AMX tiles (else the FMA engine)
  bool control = false;  // negative control: checked against the wrong mask, must fail
};

template <ElemKind K, int D, FlashFlags F, int BQ = 64, int BK = 64>
Case make(Problem pb) {
  pb.dtype = K == ElemKind::f32 ? DType::f32 : K == ElemKind::bf16 ? DType::bf16 : DType::f16;
  pb.head_dim = D;
  pb.causal = F.causal;
  if (F.softcap && pb.softcap == 0) pb.softcap = 30.0f;
  if (F.sinks && pb.num_sinks == 0) pb.num_sinks = 2;
  pb.bias = F.bias;
  pb.window = F.window;
  pb.segments = F.segments;  // a kernel without the flag has no segment code
  pb.name = std::string(dtype_name(pb.dtype)) + " D" + std::to_string(D) + " BQ" +
            std::to_string(BQ) + " BK" + std::to_string(BK) + " " + pb.name;
  using Config = cpu::FlashFwdConfig<K, D, BQ, BK, F>;
  return {pb, &cpu::flash_fwd_tasks<Config>, BQ, cpu::flash_fwd_uses_amx<Config>()};
}


Problem shape(const char* name, int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t sk) {
  Problem pb;
  pb.name = name;
  pb.batch = b, pb.heads_q = hq, pb.heads_kv = hkv, pb.seqlen_q = sq, pb.seqlen_k = sk;
  return pb;
}

// Proves the comparison can fail: a causal kernel judged against a non-causal reference.
Case control_case() {
  Case c = make<ElemKind::f32, 64, kCausal>(shape("CONTROL causal vs full reference", 1, 2, 2, 100, 100));
  c.control = true;
  return c;
}

template <class F> Problem with(Problem pb, F&& edit) {
  edit(pb);
  return pb;
}

std::vector<Case> cases() {
  auto window = [](int64_t l, int64_t r) {
    return [=](Problem& p) { p.window_left = l, p.window_right = r; };
  };
  auto varlen = [](std::vector<int64_t> q, std::vector<int64_t> k) {
    return [=](Problem& p) { p.varlen_q = q, p.varlen_k = k; };
  };
  constexpr auto f32 = ElemKind::f32, bf16 = ElemKind::bf16, f16 = ElemKind::f16;
  return {
      make<f32, 64, kPlain>(shape("plain", 2, 4, 4, 129, 129)),
      make<f32, 64, kPlain>(shape("length 1", 1, 2, 2, 1, 1)),
      make<f32, 128, kPlain>(shape("Sq 7 Sk 129", 2, 3, 3, 7, 129)),
      make<f32, 64, kPlain>(with(shape("strided rows", 2, 2, 2, 65, 33), [](Problem& p) { p.row_pad = 8; })),
      make<f32, 64, kCausal>(shape("causal", 2, 4, 4, 129, 129)),
      make<f32, 64, kCausal>(shape("causal Sq 7 Sk 129", 1, 2, 2, 7, 129)),
      make<f32, 64, kCausal>(shape("causal Sq 129 Sk 7", 1, 2, 2, 129, 7)),
      make<f32, 64, kWindow>(with(shape("window 17/5", 1, 2, 2, 200, 200), window(17, 5))),
      make<f32, 64, kCausalWindow>(with(shape("causal window 33", 1, 2, 2, 300, 260), window(33, 0))),
      make<f32, 64, kWindow>(with(shape("empty window", 1, 2, 2, 70, 70), window(-5, -10))),
      make<f32, 64, kWindowSinks>(with(shape("empty window + sinks", 1, 2, 2, 70, 70), window(-5, -10))),
      make<f32, 64, kSoftcap>(with(shape("softcap 30", 2, 2, 2, 257, 257), [](Problem& p) { p.logit_scale = 8; })),
      make<f32, 64, kSinks>(with(shape("3 sinks", 2, 3, 3, 129, 100), [](Problem& p) { p.num_sinks = 3; })),
      make<f32, 64, kCausalSinks>(with(shape("causal sinks unnormalized", 1, 2, 2, 129, 129),
                                       [](Problem& p) { p.normalize = false; })),
      make<f32, 64, kPlain>(with(shape("unnormalized", 1, 2, 2, 77, 90), [](Problem& p) { p.normalize = false; })),
      make<f32, 64, kBias>(shape("bias", 2, 3, 3, 100, 129)),
      make<f32, 64, kBias>(with(shape("bias bcast b,h", 2, 3, 3, 100, 129),
                                [](Problem& p) { p.bias_bcast_b = p.bias_bcast_h = true; })),
      make<f32, 64, kBiasSoftcap>(with(shape("bias softcap", 1, 2, 2, 65, 150), [](Problem& p) { p.logit_scale = 4; })),
      make<f32, 64, kSegments>(shape("segments", 2, 2, 2, 300, 300)),
      make<f32, 64, kCausalSegments>(shape("causal segments", 2, 2, 2, 300, 280)),
      make<f32, 64, kPlain>(with(shape("varlen", 1, 2, 2, 0, 0), varlen({1, 7, 129, 64, 5}, {1, 9, 129, 70, 0}))),
      make<f32, 64, kCausal>(with(shape("varlen causal", 1, 4, 2, 0, 0), varlen({130, 1, 65}, {130, 20, 3}))),
      make<f32, 64, kPlain>(shape("GQA 8/2", 2, 8, 2, 70, 90)),
      make<f32, 64, kCausal>(shape("MQA 6/1", 1, 6, 1, 129, 129)),
      make<f32, 72, kPlain>(shape("head dim 72", 1, 2, 2, 100, 100)),
      make<f32, 256, kCausal, 32, 32>(shape("head dim 256", 1, 2, 2, 129, 129)),
      make<f32, 64, kPlain, 16, 100>(shape("block 16x100", 1, 2, 2, 150, 333)),
      make<f32, 64, kCausal, 32, 48>(shape("block 32x48", 1, 2, 2, 150, 333)),
      make<f32, 64, kAll>(with(shape("all features", 2, 4, 2, 150, 170), [](Problem& p) {
        p.window_left = 40, p.window_right = 8, p.logit_scale = 4;
      })),
      make<f32, 128, kCausal>(shape("S 2048 causal", 1, 2, 2, 2048, 2048)),
      make<f32, 128, kSoftcap>(with(shape("S 2048 softcap 30", 1, 1, 1, 2048, 2048),
                                    [](Problem& p) { p.logit_scale = 8; })),
      make<bf16, 64, kPlain>(shape("plain", 2, 4, 4, 129, 129)),
      make<bf16, 128, kCausal>(shape("causal", 1, 4, 2, 257, 257)),
      make<bf16, 64, kBiasSoftcap>(with(shape("bias softcap", 1, 2, 2, 65, 150), [](Problem& p) { p.logit_scale = 4; })),
      make<bf16, 64, kCausal>(with(shape("varlen causal", 1, 4, 2, 0, 0), varlen({130, 1, 65}, {130, 20, 3}))),
      make<bf16, 72, kWindowSinks>(with(shape("window sinks D72", 1, 2, 2, 150, 150), window(20, 20))),
      make<bf16, 64, kAll>(with(shape("all features", 2, 4, 2, 150, 170), [](Problem& p) {
        p.window_left = 40, p.window_right = 8, p.logit_scale = 4;
      })),
      make<bf16, 128, kPlain>(shape("S 2048", 1, 2, 2, 2048, 2048)),
      make<bf16, 128, kCausal, 128, 64>(shape("causal S 1000", 1, 2, 1, 1000, 1000)),
      // Large logits: the reference max moves often (window flushes and rescales).
      make<bf16, 128, kPlain, 128, 64>(with(shape("large logits unnormalized", 1, 2, 2, 300, 1500),
                                            [](Problem& p) { p.logit_scale = 6, p.normalize = false; })),
      make<f32, 128, kCausal, 128, 64>(with(shape("large logits unnormalized", 1, 2, 2, 300, 1500),
                                            [](Problem& p) { p.logit_scale = 6, p.normalize = false; })),
      make<bf16, 64, kSinks, 32, 32>(with(shape("sinks unnormalized", 2, 2, 2, 77, 61),
                                          [](Problem& p) { p.normalize = false; })),
      make<bf16, 128, kBias, 64, 128>(with(shape("bias bcast h, Sq 33 Sk 300", 2, 2, 2, 33, 300),
                                           [](Problem& p) { p.bias_bcast_h = true; })),
      make<bf16, 256, kCausalWindow, 128, 64>(with(shape("D256 causal window", 1, 2, 2, 600, 600), window(100, 0))),
      make<bf16, 64, kSegments, 128, 64>(with(shape("segments strided", 2, 2, 2, 300, 257),
                                              [](Problem& p) { p.row_pad = 32; })),
      make<f16, 64, kPlain>(shape("plain", 2, 4, 4, 129, 129)),
      make<f16, 128, kCausal>(shape("causal", 1, 4, 2, 257, 200)),
      make<f16, 64, kCausalWindowSegments>(with(shape("causal window segments", 2, 2, 2, 200, 200),
                                                window(30, 0))),
      make<f16, 64, kSinks>(with(shape("varlen sinks", 1, 2, 2, 0, 0), varlen({3, 100, 17}, {50, 100, 1}))),
      control_case(),
  };
}

// exp_approx / tanh_approx against libm in float64, scalar and vector: worst error in ulps
// over a dense sweep (the softmax and softcap rely on ~1-2 ulp).
bool check_math() {
  auto ulps = [](float got, double want) {
    const float w = float(want);
    const double ulp = double(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(w);
    return std::fabs(double(got) - want) / ulp;
  };
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.000731f * (1.0f + std::fabs(x))) {
    const cpu::vf v = x - cpu::vf{};
    worst_exp = std::max({worst_exp, ulps(cpu::exp_approx(x), std::exp(double(x))),
                          ulps(cpu::exp_approx(v)[1], std::exp(double(x)))});
    if (std::fabs(x) < 20)
      worst_tanh = std::max({worst_tanh, ulps(cpu::tanh_approx(x), std::tanh(double(x))),
                             ulps(cpu::tanh_approx(v)[1], std::tanh(double(x)))});
  }
  const bool specials = cpu::exp_approx(-INFINITY) == 0.0f && cpu::exp_approx(-100.0f) == 0.0f &&
                        std::isnan(cpu::exp_approx(NAN)) && std::isnan(cpu::tanh_approx(NAN)) &&
                        cpu::exp_approx(-INFINITY - cpu::vf{})[0] == 0.0f;
  const bool ok = worst_exp <= 2.0 && worst_tanh <= 2.0 && specials;
  std::printf("%-4s     math: exp max %.2f ulp, tanh max %.2f ulp (limit 2), specials %s\n",
              ok ? "ok" : "FAIL", worst_exp, worst_tanh, specials ? "ok" : "wrong");
  return ok;
}

struct Errors {
  double out_rel_l2, lse_rel_l2;
  bool ok;
};

// rel-L2 of out and of the finite lse values; -inf must match exactly, NaN never passes.
Errors compare(const Inputs& in, const std::vector<double>& ref_out, const std::vector<double>& ref_lse,
               double tol) {
  double num = 0, den = 0, lnum = 0, lden = 0;
  bool ok = true;
  for (int64_t i = 0; i < in.out_elems(); ++i) {
    double got = in.out_at(i), want = ref_out[size_t(i)];
    if (!std::isfinite(got)) ok = false;
    num += (got - want) * (got - want), den += want * want;
  }
  for (int64_t i = 0; i < in.lse_elems(); ++i) {
    double got = in.lse_at(i), want = ref_lse[size_t(i)];
    if (std::isinf(want) || std::isinf(got)) {
      if (got != want) ok = false;
      continue;
    }
    if (std::isnan(got)) ok = false;
    lnum += (got - want) * (got - want), lden += want * want;
  }
  Errors e;
  e.out_rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.lse_rel_l2 = lden > 0 ? std::sqrt(lnum / lden) : std::sqrt(lnum);
  e.ok = ok && e.out_rel_l2 <= tol && e.lse_rel_l2 <= tol;
  return e;
}

}  // namespace
}  // namespace ejk::bench

int main(int argc, char** argv) {
  using namespace ejk::bench;
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::random_device{}();
  std::mt19937_64 rng(seed);
  std::printf("seed %llu\n", (unsigned long long)seed);
  int failures = check_math() ? 0 : 1;
  for (const Case& c : cases()) {
    Inputs in(c.pb, rng);
    in.poison_outputs();
    run_threaded(c.fn, in.params(), c.block_q, 2);
    std::vector<double> ref_out(size_t(in.out_elems())), ref_lse(size_t(in.lse_elems()));
    ejk::FlashFwdParams ref_params = in.params();
    if (c.control) ref_params.mask.causal = !ref_params.mask.causal;
    ejk::reference_flash_fwd(ref_params, c.pb.dtype, ref_out.data(), ref_lse.data());
    const double tol = c.pb.dtype == ejk::DType::f32 ? 1e-5 : 1e-2;
    Errors e = compare(in, ref_out, ref_lse, tol);
    const bool passed = c.control ? !e.ok : e.ok;
    std::printf("%-4s %-3s %-58s out %.2e  lse %.2e  (tol %.0e)%s\n", passed ? "ok" : "FAIL",
                c.amx ? "amx" : "fma", c.pb.name.c_str(), e.out_rel_l2, e.lse_rel_l2, tol,
                c.control ? "  [must exceed tol]" : "");
    failures += !passed;
  }
  std::printf("%d case(s) failed\n", failures);
  return failures ? 1 : 0;
}
