// Runs the head_dim 80 flash attention variant this program compiled itself and, given a bundle
// file, the head_dim 96 one from it (see CMakeLists.txt); checks each against the float64
// reference. Exits 0 when both came from where they should ("aot", "bundle") and match.
#include <ejk/bundle.h>
#include <ejk/core/error.h>
#include <ejk/ops/flash_attention.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

double max_error(const float* got, const std::vector<double>& want) {
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) err = std::fmax(err, std::fabs(got[i] - want[i]));
  return err;
}

// Flash attention at head_dim `d` on random f32 inputs; true when the variant came from
// `expected` and matches the reference. S <= 256: the heuristic picks bq64.bk64.
bool check_flash(int64_t d, ejk::VariantSource expected) {
  const int64_t B = 2, S = 200, Hq = 4, Hkv = 2;
  std::mt19937 rng(static_cast<uint32_t>(d));
  std::normal_distribution<float> normal;
  std::vector<float> q(B * S * Hq * d), k(B * S * Hkv * d), v(B * S * Hkv * d);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);
  auto view = [](std::vector<float>& data, ejk::Dims shape) {
    return ejk::TensorView{data.data(), ejk::DType::f32, ejk::Device{}, shape, ejk::contiguous_strides(shape)};
  };
  ejk::FlashAttentionInputs in;
  in.q = view(q, {B, S, Hq, d});
  in.k = view(k, {B, S, Hkv, d});
  in.v = view(v, {B, S, Hkv, d});

  const ejk::FlashAttentionResult r = ejk::flash_attention(in);
  const ejk::FlashAttentionReference ref = ejk::flash_attention_reference(in);
  const double out_err = max_error(r.out.data_as<float>(), ref.out);
  const double lse_err = max_error(r.lse.data_as<float>(), ref.lse);
  const std::string source(ejk::source_name(r.info.source));
  std::printf("variant %s (from %s): max |out - reference| = %.2e, max |lse - reference| = %.2e\n",
              r.info.key.c_str(), source.c_str(), out_err, lse_err);
  if (r.info.source != expected) {
    std::fprintf(stderr, "FAIL: expected the variant from %s, got %s\n",
                 std::string(ejk::source_name(expected)).c_str(), source.c_str());
    return false;
  }
  return out_err < 1e-4 && lse_err < 1e-4;
}

}  // namespace

int main(int argc, char** argv) try {
  bool ok = check_flash(80, ejk::VariantSource::aot);  // the program's own, built in
  if (argc > 1) {
    std::printf("bundle %s: %zu entries\n", argv[1], ejk::load_bundle(argv[1]));
    ok = check_flash(96, ejk::VariantSource::bundle) && ok;
  }
  return ok ? 0 : 1;
} catch (const ejk::Error& e) {
  std::fprintf(stderr, "FAIL: %s\n", e.what());
  return 1;
}
