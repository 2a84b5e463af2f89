// `ejk run state_space_v2` and `ejk run state_space_v2_backward`: the problem's sizes, groups, an
// initial state (and a final state's gradient), packed sequences (--varlen). a is negative (-0.5 to
// -2: decays in (0, 1)) and dt a softplus of normals, as Mamba-2's projections give them.
#include <algorithm>
#include <cmath>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"
#include "state_space_varlen.h"

namespace ejk::cli {
namespace {

class Ssm2Case final : public OpCase {
 public:
  explicit Ssm2Case(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "state_space_v2_backward" : "state_space_v2"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch (varlen: sequences)");
    cmd.add_option("--s", s_, "Tokens per sequence (varlen: packed total)");
    cmd.add_option("--h", h_, "Heads");
    cmd.add_option("--p", p_, "Head dim P");
    cmd.add_option("--g", g_, "Groups of B and C (dividing the heads)");
    cmd.add_option("--n", n_, "State size N");
    cmd.add_flag("--init", init_, "An initial state");
    cmd.add_flag("--varlen", varlen_, "Packed sequences of random lengths (one empty) with cu_seqlens");
    if (backward_) cmd.add_flag("--dht", dht_, "A gradient of the final state");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), s = size(s_, "--s"), h = size(h_, "--h"), p = size(p_, "--p"),
                  g = size(g_, "--g"), n = size(n_, "--n");
    const int64_t packs = varlen_ ? 1 : b;
    std::vector<InputSpec> in{{"x", {packs, s, h, p}, dtype},  {"a", {h}, DType::f32}, {"b", {packs, s, g, n}, dtype},
                              {"c", {packs, s, g, n}, dtype}, {"d", {h}, DType::f32}, {"dt", {packs, s, h}, dtype}};
    if (init_) in.push_back({"initial_state", {b, h, p, n}, DType::f32});
    if (varlen_) in.push_back({"cu_seqlens", {b + 1}, DType::i32});
    if (backward_) in.push_back({"d_y", {packs, s, h, p}, dtype});
    if (backward_ && dht_) in.push_back({"d_final_state", {b, h, p, n}, DType::f32});
    return in;
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "cu_seqlens") {
      const auto cu = ssm_random_offsets(t.numel() - 1, size(s_, "--s"), rng);
      std::copy(cu.begin(), cu.end(), t.data_as<int32_t>());
      return;
    }
    if (name != "a" && name != "dt") return OpCase::fill(name, t, rng);
    Tensor f = Tensor::empty(t.shape(), DType::f32);
    std::uniform_real_distribution<float> ud(0.5f, 2.0f);
    std::normal_distribution<float> nd(-1.0f, 0.5f);
    for (int64_t i = 0; i < f.numel(); ++i)
      f.data_as<float>()[i] = name == "a" ? -ud(rng) : float(std::log1p(std::exp(double(nd(rng)))));
    const Tensor r = t.dtype() == DType::f32 ? f : from_f32(f, t.dtype());
    std::copy_n(static_cast<const char*>(r.data()), r.nbytes(), static_cast<char*>(t.data()));
  }

  // Per token, head and head dim: N updates and N output terms (the backward recomputes the
  // states twice and makes about five passes).
  Work work(const HostCase& c) const override {
    const double n = double(size(n_, "--n"));
    return {double(c.input("x")->numel()) * n * (backward_ ? 14.0 : 4.0), 0};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  bool backward_;
  std::string b_ = "2", s_ = "256", h_ = "8", p_ = "64", g_ = "1", n_ = "128";
  bool init_ = false, dht_ = false, varlen_ = false;
};

}  // namespace

OpCase* state_space_v2_case() {
  static Ssm2Case c(false);
  return &c;
}

OpCase* state_space_v2_backward_case() {
  static Ssm2Case c(true);
  return &c;
}

EJK_REGISTER_CASE(state_space_v2_case);
EJK_REGISTER_CASE(state_space_v2_backward_case);

}  // namespace ejk::cli
