// The CUDA backend through the public API: randomized feature combinations against the
// float64 reference and against the CPU backend, with poisoned outputs. Skips with the reason
// when no GPU can run here.
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <random>

#include "ejk/core/error.h"
#include "flash_test_util.h"

using namespace ejk;

namespace {

// Runs `c` on device 0 and returns host copies of out and lse.
std::pair<Tensor, Tensor> run_on_cuda(const test::FlashCase& c, const FlashAttentionOptions& opt, RunInfo& info) {
  Device gpu{DeviceKind::cuda, 0};
  std::vector<Tensor> keep;
  FlashAttentionInputs in = c.inputs_on(gpu, keep);
  auto [out, lse] = test::poisoned_outputs(c);
  Tensor dout = out.to(gpu), dlse = lse.to(gpu);
  info = flash_attention_into(in, opt, dout.view(), dlse.view());
  synchronize(gpu);
  return {dout.to(Device{}), dlse.to(Device{})};
}

}  // namespace

TEST_CASE("CUDA flash attention matches the float64 reference and the CPU backend", "[flash][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  std::mt19937_64 rng(90);
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  for (int i = 0; i < 120; ++i) {
    test::FlashCaseSpec s;
    s.seed = 5000 + i;
    s.dtype = i % 2 ? DType::bf16 : DType::f16;
    s.d = pick({64, 128, 128, 96, 256, 80, 160});
    s.hkv = pick({1, 2});
    s.hq = s.hkv * pick({1, 4, 8});
    s.varlen = coin(0.15);
    s.b = s.varlen ? pick({1, 3}) : pick({1, 2});
    s.sq = std::uniform_int_distribution<int64_t>(1, coin(0.8) ? 300 : 2049)(rng);
    s.sk = coin(0.3) ? s.sq : std::uniform_int_distribution<int64_t>(1, 700)(rng);
    s.causal = coin(0.5);
    if (coin(0.3)) s.window = SlidingWindow{pick({0, 16, 100}), pick({0, 3, 64})};
    if (coin(0.3)) s.softcap = static_cast<float>(pick({5, 30}));
    s.sinks = coin(0.3);
    s.segments = !s.varlen && coin(0.25);
    s.bias = !s.varlen && coin(0.25);
    s.normalize_output = !coin(0.1);
    auto c = test::make_random_case(s);
    FlashAttentionOptions opt = c.options(0, 0);
    RunInfo info;
    auto [out, lse] = run_on_cuda(c, opt, info);
    auto ref = flash_attention_reference(c.inputs(), opt);
    Tensor o = test::to_f32(out);
    double num = 0, den = 0;
    bool nan = false;
    for (int64_t j = 0; j < o.numel(); ++j) {
      double x = o.data_as<float>()[j], y = ref.out[j];
      nan |= std::isnan(x);
      num += (x - y) * (x - y);
      den += y * y;
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    double lse_err = 0;
    bool lse_bad = false;
    for (int64_t j = 0; j < lse.numel(); ++j) {
      double x = lse.data_as<float>()[j], y = ref.lse[j];
      if (std::isnan(x) || std::isinf(x) != std::isinf(y)) lse_bad = true;
      else if (!std::isinf(y)) lse_err = std::max(lse_err, std::abs(x - y));
    }
    INFO(fmt::format("case {} {} b{} sq{} sk{} hq{} hkv{} d{} -> {}: rel_l2 {:.3e} lse {:.3e}", i,
                     dtype_name(s.dtype), s.b, s.sq, s.sk, s.hq, s.hkv, s.d, info.key, rel, lse_err));
    CHECK(info.backend == Backend::cuda);
    CHECK_FALSE(nan);
    CHECK_FALSE(lse_bad);
    CHECK(rel <= 1e-2);
    CHECK(lse_err <= 1e-2);
    // And against the CPU backend, where this build can run the CPU variant.
    try {
      auto cpu = flash_attention(c.inputs(), c.options(0, 0));
      Tensor co = test::to_f32(cpu.out);
      double n2 = 0, d2 = 0;
      for (int64_t j = 0; j < co.numel(); ++j) {
        double x = o.data_as<float>()[j], y = co.data_as<float>()[j];
        n2 += (x - y) * (x - y);
        d2 += y * y;
      }
      CHECK((d2 > 0 ? std::sqrt(n2 / d2) : std::sqrt(n2)) <= 1e-2);
    } catch (const CompileError& e) {
      WARN("CPU comparison skipped: " << e.what());
    }
  }
}
