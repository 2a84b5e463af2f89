// The dense attention mask (attention_mask, `.dmask` keys) of flash_attention and
// flash_attention_backward on CUDA: the sm80-family forward (also on sm90a) and the tensor-core
// backward with the device tile summary (flash_mask_tiles.cuh), against the float64 reference:
// densities 0, 0.3 and 1, a fully hidden row, fully hidden tiles, broadcast batch and head dims,
// with causal, window, segment ids, sinks and GQA; NaN in the keys of fully hidden tiles reaches no
// output (the walk skips those tiles). Skips where no GPU can run.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "ejk/admin.h"
#include "flash_bwd_gpu.h"

using namespace flash_bwd_test;
using Catch::Matchers::ContainsSubstring;

namespace {

const ReferenceOutput& find(const std::vector<ReferenceOutput>& ref, const std::string& name) {
  const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
  REQUIRE(r != ref.end());
  return *r;
}

Problem masked(DenseMask m, const std::function<void(Problem&)>& more = {}) {
  Problem p;
  p.dtype = DType::bf16, p.b = 2, p.sq = 300, p.sk = 333, p.hq = 4, p.hkv = 2, p.d = 64, p.mask = m;
  if (more) more(p);
  return p;
}

// The forward (make_case runs it on the GPU) and the backward on the GPU, against the reference.
void check_problem(const Problem& p, uint64_t seed) {
  const Case c = make_case(p, seed, kGpu);
  const Mismatch out = compare(c.get("out"), find(reference("flash_attention", c.forward_args()), "out").values);
  INFO(fmt::format("out: {}: rel_l2 {:.3e}", p.name(), out.rel_l2));
  CHECK_FALSE(out.nonfinite);
  CHECK(out.rel_l2 <= 1e-2);
  OnGpu g = to_gpu(c);
  const RunInfo info = run("flash_attention_backward", g.args);
  synchronize(kGpu);
  CHECK_THAT(info.key, ContainsSubstring(".dmask"));
  check_gpu_gradients(p, c, g, info.key);
}

}  // namespace

TEST_CASE("dense mask on CUDA: forward and gradients match the float64 reference", "[flash][dmask][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  using W = std::array<int64_t, 2>;
  uint64_t seed = 1700;
  check_problem(masked({0.3}), seed++);
  check_problem(masked({1.0}), seed++);
  check_problem(masked({0.0}), seed++);
  check_problem(masked({0.7, false, false, true}, [](Problem& p) { p.d = 128; }), seed++);
  check_problem(masked({0.3, false, true, true}, [](Problem& p) { p.causal = true; }), seed++);
  check_problem(masked({0.5, true, false, false}, [](Problem& p) { p.segments = true, p.dtype = DType::f16; }), seed++);
  check_problem(masked({0.4, true, true, true}, [](Problem& p) { p.window = W{40, 9}, p.sinks = SinkKind::per_head; }),
                seed++);
  check_problem(masked({0.6}, [](Problem& p) { p.hkv = 1, p.softcap = 3.0, p.d_lse = true, p.d = 96; }), seed++);
}

TEST_CASE("dense mask on CUDA: keys of fully hidden tiles are never read", "[flash][dmask][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  // Keys [64, 128) hidden from every query: whole 64-key tiles of the forward (128 x 64) and of the
  // backward (64 x 64), which the walks skip; NaN in their K and V rows must reach no output.
  Problem p = masked({0.5, false, false, true});
  Case c = make_case(p, 1800, kGpu);
  for (const char* name : {"k", "v"}) {
    Tensor& t = const_cast<Tensor&>(c.get(name));
    auto* x = t.data_as<uint16_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (i / (p.hkv * p.d) % p.sk >= 64 && i / (p.hkv * p.d) % p.sk < 128) x[i] = 0x7fc0;  // bf16 NaN
  }
  OnGpu g = to_gpu(c);
  Args f = c.scalars;
  for (const auto& [n, t] : g.inputs)
    if (n != "out" && n != "lse" && n != "d_out" && n != "d_lse") f.set(n, t.view());
  Tensor out = Tensor::empty(c.get("out").shape(), p.dtype, kGpu), lse = Tensor::empty(c.get("lse").shape(), DType::f32, kGpu);
  f.set("out", out.view()).set("lse", lse.view());
  run("flash_attention", f);
  run("flash_attention_backward", g.args);
  synchronize(kGpu);
  CHECK_FALSE(compare(out.to(Device{}), find(reference("flash_attention", c.forward_args()), "out").values).nonfinite);
  for (const auto& [name, t] : g.outputs) {
    INFO(name);
    CHECK_FALSE(compare(t.to(Device{}), std::vector<double>(size_t(t.numel()), 0.0)).nonfinite);
  }
}
