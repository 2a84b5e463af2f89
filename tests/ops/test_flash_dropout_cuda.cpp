// Dropout in flash attention on CUDA (common/philox.h): the keep mask read back from the forward
// (V = identity rows) against philox.h's definition for two block configs on each CUDA target
// the device takes, so CPU and CUDA draw the same mask; forward and every gradient against the
// float64 reference with the same mask (tensor-core and scalar backward launches); two backward
// runs bit-identical. Skips where no GPU can run.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "ejk/admin.h"
#include "ejk/kernels/common/philox.h"
#include "flash_bwd_gpu.h"

using namespace flash_bwd_test;
using Catch::Matchers::ContainsSubstring;

namespace {

// The forward (make_case ran it on the GPU) against the reference, then the backward on the GPU.
void check_problem(const Problem& p, uint64_t seed) {
  const Case c = make_case(p, seed, kGpu);
  Args fwd = c.forward_args();
  fwd.set("out", c.get("out").view()).set("lse", c.get("lse").view());
  const std::vector<ReferenceOutput> fref = reference("flash_attention", fwd);
  const auto out_ref = std::find_if(fref.begin(), fref.end(), [](const ReferenceOutput& x) { return x.name == "out"; });
  REQUIRE(out_ref != fref.end());
  const Mismatch fe = compare(c.get("out"), out_ref->values);
  INFO(fmt::format("out: {}: rel_l2 {:.3e}", p.name(), fe.rel_l2));
  CHECK(fe.rel_l2 <= 1e-2);
  OnGpu g = to_gpu(c);
  const RunInfo info = run("flash_attention_backward", g.args);
  synchronize(kGpu);
  CHECK_THAT(info.key, ContainsSubstring(".drop"));
  check_gpu_gradients(p, c, g, info.key);
}

}  // namespace

TEST_CASE("flash attention dropout on CUDA: the keep mask is philox.h's", "[flash_dropout][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const int64_t B = 2, S = 96, H = 2, D = 128;
  const double prob = 0.37;
  const int64_t seed = -0x1234abcd5678ll;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  Tensor q = Tensor::empty({B, S, H, D}, DType::bf16), k = Tensor::empty({B, S, H, D}, DType::bf16);
  Tensor v = Tensor::empty({B, S, H, D}, DType::bf16);
  for (int64_t i = 0; i < q.numel(); ++i)
    q.data_as<uint16_t>()[i] = float_to_bf16(normal(rng)), k.data_as<uint16_t>()[i] = float_to_bf16(normal(rng));
  for (int64_t i = 0; i < v.numel(); ++i)  // v[b, j, h] = e_j: out[b, i, h, j] is weight (i, j)
    v.data_as<uint16_t>()[i] = float_to_bf16((i / (D * H)) % S == i % D ? 1.0f : 0.0f);
  const DropoutParams dp{uint64_t(seed), uint32_t(std::floor(double(float(prob)) * 4294967296.0)),
                         float(1.0 / (1.0 - double(float(prob))))};
  Tensor qd = q.to(kGpu), kd = k.to(kGpu), vd = v.to(kGpu);
  for (auto [bq, bk] : {std::pair{128, 64}, std::pair{64, 128}}) {
    Tensor out = Tensor::empty(q.shape(), DType::bf16).to(kGpu), lse = Tensor::empty({B, H, S}, DType::f32).to(kGpu);
    Args a;
    a.set("q", qd.view()).set("k", kd.view()).set("v", vd.view()).set("out", out.view()).set("lse", lse.view());
    a.set("causal", true).set("dropout_prob", prob).set("dropout_seed", seed).tune("block_q", bq).tune("block_k", bk);
    const RunInfo info = run("flash_attention", a);
    synchronize(kGpu);
    INFO(info.key);
    const Tensor host = out.to(Device{});
    int64_t wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < S; ++j) {
            const float x = bf16_to_float(host.data_as<uint16_t>()[((b * S + i) * H + h) * D + j]);
            wrong += (x != 0.0f) != (j <= i && dropout_keep(dp, b, h, i, j));
          }
    CHECK(wrong == 0);
  }
}

TEST_CASE("flash attention dropout on CUDA matches the float64 reference", "[flash_dropout][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  using W = std::array<int64_t, 2>;
  std::vector<Problem> v(6);
  for (Problem& p : v) p.dtype = DType::bf16, p.sq = 100, p.sk = 90, p.dropout_prob = 0.3, p.dropout_seed = 17;
  v[0].causal = true, v[0].hq = 6, v[0].hkv = 2;
  v[1].window = W{20, 5}, v[1].softcap = 3.0, v[1].sinks = SinkKind::per_head, v[1].dtype = DType::f16;
  v[2].d = 128, v[2].segments = true, v[2].dropout_prob = 0.6;
  v[3].varlen = true, v[3].b = 3, v[3].sq = 150, v[3].sk = 130, v[3].causal = true;
  v[4].bias = BiasKind::shared_batch, v[4].causal = true;  // the scalar backward kernel
  v[5].d = 256, v[5].sq = 70, v[5].sk = 70, v[5].dropout_seed = -5;
  uint64_t seed = 900;
  for (const Problem& p : v) check_problem(p, seed++);
}

TEST_CASE("flash attention backward with dropout on CUDA is deterministic", "[flash_dropout][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  Problem p;
  p.dtype = DType::bf16, p.b = 2, p.sq = 300, p.sk = 300, p.hq = 8, p.hkv = 2, p.dropout_prob = 0.2, p.dropout_seed = 3;
  const Case c = make_case(p, 7, kGpu);
  OnGpu a = to_gpu(c), b = to_gpu(c);
  run("flash_attention_backward", a.args);
  run("flash_attention_backward", b.args);
  synchronize(kGpu);
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    INFO(a.outputs[i].first);
    const Tensor x = a.outputs[i].second.to(Device{}), y = b.outputs[i].second.to(Device{});
    CHECK(std::memcmp(x.data(), y.data(), x.nbytes()) == 0);
  }
}
