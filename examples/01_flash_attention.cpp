// 01: flash attention forward through the C++ API, on CPU tensors you own.
// Build: part of the project (target example_01_flash_attention); run without arguments.
#include <ejk/ops/flash_attention.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int64_t B = 1, S = 256, Hq = 8, Hkv = 2, D = 64;  // GQA: 4 query heads per kv head
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> q(B * S * Hq * D), k(B * S * Hkv * D), v(B * S * Hkv * D);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);

  auto view = [](std::vector<float>& data, ejk::Dims shape) {
    return ejk::TensorView{data.data(), ejk::DType::f32, ejk::Device{}, shape, ejk::contiguous_strides(shape)};
  };
  ejk::FlashAttentionInputs in;
  in.q = view(q, {B, S, Hq, D});
  in.k = view(k, {B, S, Hkv, D});
  in.v = view(v, {B, S, Hkv, D});

  ejk::FlashAttentionOptions opt;
  opt.causal = true;
  opt.sliding_window = ejk::SlidingWindow{64, 0};  // each query sees itself and 64 keys back
  opt.logits_soft_cap = 30.0f;

  ejk::FlashAttentionResult r = ejk::flash_attention(in, opt);
  std::printf("variant %s (from %s)\n", r.info.key.c_str(), std::string(ejk::source_name(r.info.source)).c_str());
  std::printf("out[0,0,0,:4] = %.4f %.4f %.4f %.4f, lse[0,0,0] = %.4f\n", r.out.data_as<float>()[0],
              r.out.data_as<float>()[1], r.out.data_as<float>()[2], r.out.data_as<float>()[3],
              r.lse.data_as<float>()[0]);

  // The float64 reference uses the same mask definitions; compare.
  ejk::FlashAttentionReference ref = ejk::flash_attention_reference(in, opt);
  double err = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) err = std::fmax(err, std::fabs(r.out.data_as<float>()[i] - ref.out[i]));
  std::printf("max |out - reference| = %.2e\n", err);
  return err < 1e-4 ? 0 : 1;
}
