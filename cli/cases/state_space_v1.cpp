// `ejk run state_space_v1` and `ejk run state_space_v1_backward`: the problem's sizes, a gate,
// an initial state (and a final state's gradient), packed sequences (--varlen). A is negative
// (-0.5 to -2: decays in (0, 1)) and dt a softplus of normals, as Mamba's projections give them,
// so the state stays bounded.
#include <algorithm>
#include <cmath>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"
#include "state_space_varlen.h"

namespace ejk::cli {
namespace {

// `t` (in its dtype) from f32 values `f`.
void store(Tensor& t, const Tensor& f) {
  const Tensor r = t.dtype() == DType::f32 ? f : from_f32(f, t.dtype());
  std::copy_n(static_cast<const char*>(r.data()), r.nbytes(), static_cast<char*>(t.data()));
}

class Ssm1Case final : public OpCase {
 public:
  explicit Ssm1Case(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "state_space_v1_backward" : "state_space_v1"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch (varlen: sequences)");
    cmd.add_option("--s", s_, "Tokens per sequence (varlen: packed total)");
    cmd.add_option("--d", d_, "Channels (intermediate size)");
    cmd.add_option("--n", n_, "State size per channel");
    cmd.add_flag("--gate", gate_, "A gate (y times silu(gate))");
    cmd.add_flag("--init", init_, "An initial state");
    cmd.add_flag("--varlen", varlen_, "Packed sequences of random lengths (one empty) with cu_seqlens");
    if (backward_) cmd.add_flag("--dht", dht_, "A gradient of the final state");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), s = size(s_, "--s"), d = size(d_, "--d"), n = size(n_, "--n");
    const int64_t packs = varlen_ ? 1 : b;
    std::vector<InputSpec> in{{"x", {packs, s, d}, dtype}, {"a", {d, n}, DType::f32}, {"b", {packs, s, n}, dtype},
                              {"c", {packs, s, n}, dtype}, {"d", {d}, DType::f32},    {"dt", {packs, s, d}, dtype}};
    if (gate_) in.push_back({"gate", {packs, s, d}, dtype});
    if (init_) in.push_back({"initial_state", {b, d, n}, DType::f32});
    if (varlen_) in.push_back({"cu_seqlens", {b + 1}, DType::i32});
    if (backward_) in.push_back({"d_y", {packs, s, d}, dtype});
    if (backward_ && dht_) in.push_back({"d_final_state", {b, d, n}, DType::f32});
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
    store(t, f);
  }

  // Per token and channel: N updates and N output terms (the backward recomputes the states
  // twice and makes about five passes).
  Work work(const HostCase& c) const override {
    const Tensor& x = *c.input("x");
    const double n = double(size(n_, "--n"));
    return {double(x.numel()) * n * (backward_ ? 14.0 : 4.0), 0};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  bool backward_;
  std::string b_ = "2", s_ = "256", d_ = "256", n_ = "16";
  bool gate_ = false, init_ = false, dht_ = false, varlen_ = false;
};

}  // namespace

OpCase* state_space_v1_case() {
  static Ssm1Case c(false);
  return &c;
}

OpCase* state_space_v1_backward_case() {
  static Ssm1Case c(true);
  return &c;
}

EJK_REGISTER_CASE(state_space_v1_case);
EJK_REGISTER_CASE(state_space_v1_backward_case);

}  // namespace ejk::cli
