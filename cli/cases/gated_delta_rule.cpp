// `ejk run gated_delta_rule` and `ejk run gated_delta_rule_backward`: the problem's sizes, a
// decay, segment ids, an initial state; beta is a sigmoid (in (0, 1)) and the decay a
// log-sigmoid (most near 0), as the models that use the rule make them.
#include <algorithm>
#include <cmath>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

// f(x) of normal x into `t` in its dtype.
template <class F> void fill_mapped(Tensor& t, std::mt19937_64& rng, F f) {
  Tensor x = Tensor::empty(t.shape(), DType::f32);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = f(nd(rng));
  const Tensor r = t.dtype() == DType::f32 ? x : from_f32(x, t.dtype());
  std::copy_n(static_cast<const char*>(r.data()), r.nbytes(), static_cast<char*>(t.data()));
}

class DeltaCase final : public OpCase {
 public:
  explicit DeltaCase(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "gated_delta_rule_backward" : "gated_delta_rule"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch");
    cmd.add_option("--t", t_, "Tokens per sequence");
    cmd.add_option("--h", h_, "Heads");
    cmd.add_option("--k", k_, "Key dim K");
    cmd.add_option("--v", v_, "Value dim V");
    cmd.add_flag("--no-decay", no_decay_, "No decay (the plain delta rule)");
    cmd.add_flag("--segments", segments_, "Segment ids: runs of random lengths per row");
    cmd.add_flag("--init", init_, "An initial state");
    cmd.add_flag("--no-l2norm", no_l2norm_, "q and k as given (use_qk_l2norm=false)");
    if (backward_) cmd.add_flag("--dht", dht_, "A gradient of the final state");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), t = size(t_, "--t"), h = size(h_, "--h"), k = size(k_, "--k"),
                  v = size(v_, "--v");
    std::vector<InputSpec> in{{"q", {b, t, h, k}, dtype}, {"k", {b, t, h, k}, dtype}, {"v", {b, t, h, v}, dtype},
                              {"beta", {b, t, h}, dtype}};
    if (!no_decay_) in.push_back({"decay", {b, t, h}, dtype});
    if (segments_) in.push_back({"seg_ids", {b, t}, DType::i32});
    if (init_) in.push_back({"initial_state", {b, h, k, v}, DType::f32});
    if (backward_) in.push_back({"d_o", {b, t, h, v}, dtype});
    if (backward_ && dht_) in.push_back({"d_final_state", {b, h, k, v}, DType::f32});
    return in;
  }

  void scalars(HostCase& c) const override {
    if (no_l2norm_) c.set("use_qk_l2norm", false);
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "beta") {
      fill_mapped(t, rng, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    } else if (name == "decay") {
      fill_mapped(t, rng, [](float x) { return -float(std::log1p(std::exp(-(x + 3.0f)))); });
    } else if (name == "seg_ids") {
      // Per row, a new segment after each token with probability 1/64.
      const int64_t rows = t.shape()[0], cols = t.shape()[1];
      std::bernoulli_distribution starts(1.0 / 64);
      for (int64_t r = 0; r < rows; ++r) {
        int32_t id = 0;
        for (int64_t c = 0; c < cols; ++c) t.data_as<int32_t>()[r * cols + c] = id += c > 0 && starts(rng);
      }
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  // Per token and head: the decay, u = S^T k, the update and the output, 2 K V multiply-adds
  // each (the backward recomputes the states twice and makes six K x V passes).
  Work work(const HostCase& c) const override {
    const Tensor& v = *c.input("v");
    const int64_t tokens = v.numel() / v.shape().back(), kv = size(k_, "--k") * v.shape().back();
    return {double(tokens) * double(kv) * (backward_ ? 24.0 : 8.0), 0};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  bool backward_;
  std::string b_ = "2", t_ = "256", h_ = "4", k_ = "128", v_ = "128";
  bool no_decay_ = false, segments_ = false, init_ = false, no_l2norm_ = false, dht_ = false;
};

}  // namespace

OpCase* gated_delta_rule_case() {
  static DeltaCase c(false);
  return &c;
}

OpCase* gated_delta_rule_backward_case() {
  static DeltaCase c(true);
  return &c;
}

EJK_REGISTER_CASE(gated_delta_rule_case);
EJK_REGISTER_CASE(gated_delta_rule_backward_case);

}  // namespace ejk::cli
