// Runs the head_dim 80 flash attention variant this program compiled itself (see CMakeLists.txt)
// and checks it against the float64 reference. Exits 0 when the variant came from the program's
// built-in set ("aot") and matches.
#include <ejk/core/error.h>
#include <ejk/ops/flash_attention.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kB = 2, kS = 200, kHq = 4, kHkv = 2, kD = 80;  // S <= 256: the heuristic picks bq64.bk64

ejk::TensorView view(std::vector<float>& data, ejk::Dims shape) {
  return ejk::TensorView{data.data(), ejk::DType::f32, ejk::Device{}, shape, ejk::contiguous_strides(shape)};
}

double max_error(const float* got, const std::vector<double>& want) {
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::fmax(err, std::fabs(got[i] - want[i]));
  return err;
}

}  // namespace

int main() try {
  std::mt19937 rng(80);
  std::normal_distribution<float> normal;
  std::vector<float> q(kB * kS * kHq * kD), k(kB * kS * kHkv * kD), v(kB * kS * kHkv * kD);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);
  ejk::FlashAttentionInputs in;
  in.q = view(q, {kB, kS, kHq, kD});
  in.k = view(k, {kB, kS, kHkv, kD});
  in.v = view(v, {kB, kS, kHkv, kD});

  const ejk::FlashAttentionResult r = ejk::flash_attention(in);
  const std::string source(ejk::source_name(r.info.source));
  std::printf("variant %s (from %s)\n", r.info.key.c_str(), source.c_str());
  const ejk::FlashAttentionReference ref = ejk::flash_attention_reference(in);
  const double out_err = max_error(r.out.data_as<float>(), ref.out);
  const double lse_err = max_error(r.lse.data_as<float>(), ref.lse);
  std::printf("max |out - reference| = %.2e, max |lse - reference| = %.2e\n", out_err, lse_err);
  if (r.info.source != ejk::VariantSource::aot) {
    std::fprintf(stderr, "FAIL: expected the program's built-in variant (aot), got %s\n", source.c_str());
    return 1;
  }
  return out_err < 1e-4 && lse_err < 1e-4 ? 0 : 1;
} catch (const ejk::Error& e) {
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
