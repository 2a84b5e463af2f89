// Dropout in flash attention on the CPU (common/philox.h): forward and every gradient against the
// float64 reference with the same keep mask, over the forward's features; the keep mask read back
// from the op (V = identity) against philox.h's definition for two block configs and every query
// row of a packed batch; dropout_prob = 0 given explicitly bit-identical to no dropout; two
// backward runs bit-identical; bad dropout_prob named.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/kernels/common/philox.h"
#include "flash_bwd_problem.h"

using namespace flash_bwd_test;
using Catch::Matchers::ContainsSubstring;

namespace {

double tolerance(DType t, bool gradient) { return t == DType::f32 ? 1e-5 : gradient ? 2e-2 : 1e-2; }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The forward's out and lse (make_case ran it) and the backward's gradients against the reference.
void check_problem(const Problem& p, uint64_t seed) {
  Case c = make_case(p, seed);
  Args fwd = c.forward_args();
  fwd.set("out", c.get("out").view()).set("lse", c.get("lse").view());
  const std::vector<ReferenceOutput> fref = reference("flash_attention", fwd);
  for (const char* name : {"out", "lse"}) {
    const auto r = std::find_if(fref.begin(), fref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != fref.end());
    std::vector<double> want = r->values;
    std::vector<double> got(want.size());
    const Tensor& t = c.get(name);
    // lse -inf rows (nothing visible) compare as 0 on both sides once they agree.
    for (size_t i = 0; i < want.size(); ++i) {
      got[i] = value_at(t, int64_t(i));
      if (std::isinf(want[i]) && got[i] == want[i]) got[i] = want[i] = 0;
    }
    Tensor g = Tensor::empty(t.shape(), DType::f32);
    for (size_t i = 0; i < got.size(); ++i) g.data_as<float>()[i] = float(got[i]);
    const Mismatch e = compare(g, want);
    INFO(fmt::format("{}: {}: rel_l2 {:.3e}", name, p.name(), e.rel_l2));
    CHECK(e.rel_l2 <= tolerance(p.dtype, false));
  }
  const RunInfo info = run("flash_attention_backward", c.backward_args());
  CHECK_THAT(info.key, ContainsSubstring(".drop"));
  const std::vector<ReferenceOutput> ref = reference("flash_attention_backward", c.backward_args());
  for (const auto& [name, t] : c.outputs) {
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Mismatch e = compare(t, r->values);
    INFO(fmt::format("{}: {} -> {}: rel_l2 {:.3e}", name, p.name(), info.key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    if (name == "dsoftmax_aux") CHECK(sinks_within(c, t, r->values, tolerance(p.dtype, true)));
    else CHECK(e.rel_l2 <= tolerance(p.dtype, true));
  }
}

std::vector<Problem> dropout_problems(DType dtype) {
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v;
  auto add = [&](double prob, int64_t seed, auto f) {
    Problem p;
    p.dtype = dtype, p.dropout_prob = prob, p.dropout_seed = seed;
    f(p);
    v.push_back(p);
  };
  add(0.3, 1, [](Problem& p) { p.hq = 6, p.hkv = 2, p.causal = true, p.sinks = SinkKind::per_head, p.d_lse = true; });
  add(0.5, -7, [](Problem& p) { p.window = W{7, 3}, p.softcap = 2.5, p.bias = BiasKind::shared_batch; });
  add(0.15, 1ll << 40, [](Problem& p) { p.segments = true, p.bias = BiasKind::full, p.sinks = SinkKind::shared; });
  add(0.4, 99, [](Problem& p) { p.varlen = true, p.b = 4, p.sq = 70, p.sk = 61, p.causal = true, p.softcap = 3.0; });
  add(0.9, 5, [](Problem& p) { p.hq = 4, p.hkv = 1, p.d = 128, p.sq = 70, p.sk = 33; });
  return v;
}

}  // namespace

TEST_CASE("flash attention dropout on the CPU: forward and gradients against the reference", "[flash_dropout][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: dropout variants are not built in");
  uint64_t seed = 400;
  for (DType dtype : {DType::f32, DType::bf16})
    for (const Problem& p : dropout_problems(dtype)) check_problem(p, seed++);
}

// V = identity rows (Sk <= D): out[i, j] = P_ij * keep_ij / (1 - p), so the op's keep mask is
// out != 0 where P > 0 (small logits keep every P well above 0).
TEST_CASE("flash attention dropout: the keep mask is philox.h's for any block config", "[flash_dropout][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: dropout variants are not built in");
  const int64_t B = 2, S = 48, H = 3, D = 64;
  const double prob = 0.37;
  const int64_t seed = 0x1234abcd5678ll;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  Tensor q = Tensor::empty({B, S, H, D}, DType::f32), k = Tensor::empty({B, S, H, D}, DType::f32);
  Tensor v = Tensor::empty({B, S, H, D}, DType::f32);
  for (int64_t i = 0; i < q.numel(); ++i) q.data_as<float>()[i] = normal(rng), k.data_as<float>()[i] = normal(rng);
  for (int64_t i = 0; i < v.numel(); ++i) v.data_as<float>()[i] = (i / (D * H)) % S == i % D ? 1.0f : 0.0f;  // v[b, j, h] = e_j
  DropoutParams dp{uint64_t(seed), uint32_t(std::floor(double(float(prob)) * 4294967296.0)),
                   float(1.0 / (1.0 - double(float(prob))))};
  for (auto [bq, bk] : {std::pair{32, 64}, std::pair{64, 128}}) {
    Tensor out = Tensor::empty(q.shape(), DType::f32), lse = Tensor::empty({B, H, S}, DType::f32);
    Args a;
    a.set("q", q.view()).set("k", k.view()).set("v", v.view()).set("out", out.view()).set("lse", lse.view());
    a.set("dropout_prob", prob).set("dropout_seed", seed).tune("block_q", bq).tune("block_k", bk);
    const RunInfo info = run("flash_attention", a);
    INFO(info.key);
    int64_t wrong = 0, kept = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < S; ++j) {
            const float x = out.data_as<float>()[((b * S + i) * H + h) * D + j];
            const bool keep = dropout_keep(dp, b, h, i, j);
            wrong += (x != 0.0f) != keep;
            kept += keep;
          }
    CHECK(wrong == 0);
    CHECK(kept > 0);
  }
}

// Lengths whose keys the heuristic gives built-in variants: a build without the CPU JIT runs these.
TEST_CASE("flash attention dropout_prob = 0 is bit-identical to no dropout", "[flash_dropout][cpu]") {
  Problem p;
  p.b = 2, p.sq = 100, p.sk = 130, p.hq = 4, p.hkv = 2;
  Case plain = make_case(p, 11);
  p.dropout_prob = 0.0, p.dropout_seed = 123;
  Case zero = make_case(p, 11);
  CHECK(same_bits(plain.get("out"), zero.get("out")));
  CHECK(same_bits(plain.get("lse"), zero.get("lse")));
  const RunInfo a = run("flash_attention_backward", plain.backward_args());
  const RunInfo b = run("flash_attention_backward", zero.backward_args());
  CHECK(a.key == b.key);
  CHECK_THAT(b.key, !ContainsSubstring(".drop"));
  for (size_t i = 0; i < plain.outputs.size(); ++i) {
    INFO(plain.outputs[i].first);
    CHECK(same_bits(plain.outputs[i].second, zero.outputs[i].second));
  }
}

TEST_CASE("flash attention backward with dropout is deterministic", "[flash_dropout][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT: dropout variants are not built in");
  Problem p;
  p.b = 2, p.sq = 150, p.sk = 150, p.hq = 8, p.hkv = 2, p.dropout_prob = 0.2, p.dropout_seed = 77;
  Case a = make_case(p, 7), b = make_case(p, 7);
  CHECK(same_bits(a.get("out"), b.get("out")));
  run("flash_attention_backward", a.backward_args());
  run("flash_attention_backward", b.backward_args());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    INFO(a.outputs[i].first);
    CHECK(same_bits(a.outputs[i].second, b.outputs[i].second));
  }
}

TEST_CASE("flash attention refuses a dropout_prob that is not in 0 <= p < 1, naming it", "[flash_dropout][cpu]") {
  Problem p;
  p.b = 1, p.sq = 100, p.sk = 130, p.hq = 1, p.hkv = 1;
  Case c = make_case(p, 1);
  for (double bad : {-0.1, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN(), 0.99999999}) {
    INFO(bad);
    for (const char* op : {"flash_attention", "flash_attention_backward"}) {
      Args a = std::string(op) == "flash_attention" ? c.forward_args() : c.backward_args();
      if (std::string(op) == "flash_attention") a.set("out", c.get("out").view()).set("lse", c.get("lse").view());
      a.set("dropout_prob", bad);
      CHECK_THROWS_WITH(run(op, a), ContainsSubstring("dropout_prob"));
    }
  }
}
