// Numerics of the CPU flash attention forward against the float64 reference: every built-in
// variant, then randomized combinations of every feature.
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "flash_test_util.h"

using namespace ejk;

namespace {

// The case a built-in key computes: decoded from the key's tokens.
struct KeyFacts {
  std::string target;
  test::FlashCaseSpec spec;
  int64_t block_q = 0, block_k = 0;
  bool window = false, softcap = false, sinks = false, bias = false;
};

KeyFacts decode(const std::string& key) {
  KeyFacts f;
  std::stringstream ss(key);
  std::string tok;
  std::vector<std::string> toks;
  while (std::getline(ss, tok, '.')) toks.push_back(tok);
  f.target = toks.at(2);
  for (size_t i = 3; i < toks.size(); ++i) {
    const auto& t = toks[i];
    if (t == "f32" || t == "bf16" || t == "f16") f.spec.dtype = parse_dtype(t);
    else if (t.rfind("bq", 0) == 0) f.block_q = std::stoll(t.substr(2));
    else if (t.rfind("bk", 0) == 0) f.block_k = std::stoll(t.substr(2));
    else if (t[0] == 'd') f.spec.d = std::stoll(t.substr(1));
    else if (t == "causal") f.spec.causal = true;
    else if (t == "win") f.window = true;
    else if (t == "seg") f.spec.segments = true;
    else if (t == "cap") f.softcap = true;
    else if (t == "sink") f.sinks = true;
    else if (t == "bias") f.bias = true;
  }
  return f;
}

struct TargetOverride {
  explicit TargetOverride(const std::string& t) { setenv("EJK_CPU_TARGET", t.c_str(), 1); }
  ~TargetOverride() { unsetenv("EJK_CPU_TARGET"); }
};

bool host_supports(const std::string& target) {
  __builtin_cpu_init();
  if (target == "avx512") return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (target == "amx") return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                              __builtin_cpu_supports("avx512bf16") && host_supports("avx512");
  if (target == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return true;
}

}  // namespace

TEST_CASE("every built-in CPU variant matches the float64 reference", "[flash][cpu][aot]") {
  size_t checked = 0;
  for (const auto& op : list_ops()) {
    for (const auto& key : op.builtin) {
      if (key.rfind("flash_fwd.cpu.", 0) != 0) continue;  // this file's op only
      KeyFacts f = decode(key);
      if (!host_supports(f.target)) {
        WARN("skipping " << key << ": this CPU lacks its features");
        continue;
      }
      DYNAMIC_SECTION(key) {
        TargetOverride target(f.target);
        f.spec.b = 2; f.spec.sq = 77; f.spec.sk = 133; f.spec.hq = 4; f.spec.hkv = 2;
        f.spec.seed = checked + 1;
        f.spec.sinks = f.sinks;
        f.spec.bias = f.bias;
        if (f.window) f.spec.window = SlidingWindow{17, 9};
        if (f.softcap) f.spec.softcap = 20.0f;
        auto c = test::make_random_case(f.spec);
        auto r = test::run_and_compare(c, c.options(f.block_q, f.block_k));
        INFO(key << ": rel_l2 " << r.rel_l2 << " max_abs " << r.max_abs);
        CHECK(r.key == key);
        CHECK(r.source == VariantSource::aot);
        CHECK_FALSE(r.nan);
        CHECK_FALSE(r.lse_inf_mismatch);
        CHECK(r.rel_l2 <= test::tolerance(f.spec.dtype));
      }
      ++checked;
    }
  }
  REQUIRE(checked > 0);
}

TEST_CASE("randomized feature combinations match the float64 reference", "[flash][cpu][random]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): only built-in variants run");
  std::mt19937_64 rng(20261121);
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto pick = [&](std::initializer_list<int64_t> v) {
    return *(v.begin() + std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng));
  };
  auto length = [&] {  // odd lengths 1..2049, mostly short to bound the reference's cost
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t hi = u < 0.75 ? 200 : u < 0.95 ? 700 : 2049;
    return std::uniform_int_distribution<int64_t>(1, hi)(rng);
  };
  const int kCases = 200;
  for (int i = 0; i < kCases; ++i) {
    test::FlashCaseSpec s;
    s.seed = 1000 + i;
    s.dtype = std::array{DType::f32, DType::bf16, DType::f16}[i % 3];
    s.d = pick({64, 64, 128, 128, 32, 80});
    s.hkv = pick({1, 2});
    s.hq = s.hkv * pick({1, 4, 8});
    s.varlen = coin(0.15);
    s.b = s.varlen ? pick({1, 2, 3, 4}) : pick({1, 2});
    s.sq = length();
    s.sk = coin(0.3) ? s.sq : length();
    s.causal = coin(0.5);
    if (coin(0.3)) s.window = SlidingWindow{pick({0, 1, 16, 100, 1000}), pick({0, 3, 64, 500})};
    if (coin(0.3)) s.softcap = static_cast<float>(pick({5, 30, 50}));
    s.sinks = coin(0.3);
    s.segments = !s.varlen && coin(0.25);
    s.bias = !s.varlen && coin(0.25);
    s.normalize_output = !coin(0.1);
    if (coin(0.1)) s.scale = 0.3f;
    auto c = test::make_random_case(s);
    std::string name = fmt::format("case {}: {} b{} sq{} sk{} hq{} hkv{} d{}{}{}{}{}{}{}{}{}", i, dtype_name(s.dtype),
                                   s.b, s.sq, s.sk, s.hq, s.hkv, s.d, s.causal ? " causal" : "",
                                   s.window ? fmt::format(" win{},{}", s.window->left, s.window->right) : "",
                                   s.softcap ? " cap" : "", s.sinks ? " sinks" : "", s.segments ? " seg" : "",
                                   s.varlen ? " varlen" : "", s.bias ? " bias" : "",
                                   s.normalize_output ? "" : " unnormalized");
    auto r = test::run_and_compare(c, c.options(0, 0));
    INFO(name << " -> " << r.key << ": rel_l2 " << r.rel_l2 << " max_abs " << r.max_abs << " lse " << r.lse_max_abs);
    // Segment ids are a compile-time flag: the key has it exactly when ids are given.
    CHECK((r.key.find(".seg") != std::string::npos) == s.segments);
    CHECK_FALSE(r.nan);
    CHECK_FALSE(r.lse_inf_mismatch);
    CHECK(r.rel_l2 <= test::tolerance(s.dtype));
    CHECK(r.lse_max_abs <= (s.dtype == DType::f32 ? 1e-4 : 1e-2));
  }
}

namespace {

struct StagingSetting {
  explicit StagingSetting(const char* v) { setenv("EJK_CPU_STAGE_KV", v, 1); }
  ~StagingSetting() { unsetenv("EJK_CPU_STAGE_KV"); }
};

// Output and lse bytes of one run of `c` with EJK_CPU_STAGE_KV=setting.
std::pair<std::vector<unsigned char>, std::vector<unsigned char>> run_bytes(const test::FlashCase& c,
                                                                            const char* setting) {
  StagingSetting s(setting);
  auto [out, lse] = test::poisoned_outputs(c);
  flash_attention_into(c.inputs(), c.options(0, 0), out.view(), lse.view());
  auto bytes = [](const Tensor& t) {
    auto* p = static_cast<const unsigned char*>(t.data());
    return std::vector<unsigned char>(p, p + t.nbytes());
  };
  return {bytes(out), bytes(lse)};
}

}  // namespace

// K/V staging (runtime/src/cpu_kv_staging.h) only moves rows: the kernels compute the same
// numbers from the staged copy, bit for bit, dense and varlen, with GQA.
TEST_CASE("K/V staging leaves results bit-identical", "[flash][cpu][staging]") {
  for (bool varlen : {false, true}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      test::FlashCaseSpec s;
      s.dtype = dt;
      s.varlen = varlen;
      s.b = 3, s.sq = 300, s.sk = 257, s.hq = 8, s.hkv = 2, s.d = 64;
      s.causal = true;
      s.seed = 77;
      auto c = test::make_random_case(s);
      DYNAMIC_SECTION(dtype_name(dt) << (varlen ? " varlen" : " dense")) {
        auto plain = run_bytes(c, "0");
        auto staged = run_bytes(c, "1");
        CHECK(plain.first == staged.first);
        CHECK(plain.second == staged.second);
        // And the staged run is right (not merely equal to another run).
        StagingSetting on("1");
        auto r = test::run_and_compare(c, c.options(0, 0));
        CHECK_FALSE(r.nan);
        CHECK(r.rel_l2 <= test::tolerance(dt));
      }
    }
  }
}

TEST_CASE("EJK_CPU_STAGE_KV rejects values other than 0 and 1", "[flash][cpu][staging]") {
  test::FlashCaseSpec s;
  s.sq = s.sk = 256, s.hq = s.hkv = 4, s.d = 64, s.seed = 3;
  auto c = test::make_random_case(s);
  StagingSetting bad("yes");
  auto [out, lse] = test::poisoned_outputs(c);
  try {
    flash_attention_into(c.inputs(), c.options(0, 0), out.view(), lse.view());
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).find("EJK_CPU_STAGE_KV=\"yes\"") != std::string::npos);
  }
}
