// `ejk run merge_attention_states`: two partial results of one attention problem, [B?, T, H, D]
// outputs with [B?, H, T] LSEs of which some are -inf (on one side, and on both), and the bytes
// moved.
#include <limits>

#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class MergeAttentionStatesCase final : public OpCase {
 public:
  const char* op() const override { return "merge_attention_states"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--t", t_, "Tokens (queries)");
    cmd.add_option("--h", h_, "Heads");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--batch", batch_, "A leading batch dim of this size (default: none)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t t = size(t_, "--t"), h = size(h_, "--h"), d = size(d_, "--d");
    Dims out{t, h, d}, lse{h, t};
    if (!batch_.empty()) out = {size(batch_, "--batch"), t, h, d}, lse = {size(batch_, "--batch"), h, t};
    return {{"out_a", out, dtype}, {"lse_a", lse, DType::f32}, {"out_b", out, dtype}, {"lse_b", lse, DType::f32}};
  }

  // LSEs in [-8, 8], -inf in about 15% of lse_a's rows; lse_b's is -inf in half of those rows
  // (neither part saw a key) and in about 15% of the others.
  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name != "lse_a" && name != "lse_b") return OpCase::fill(name, t, rng);
    const bool second = name == "lse_b";
    if (!second) a_empty_.assign(size_t(t.numel()), false);
    std::uniform_real_distribution<float> value(-8.0f, 8.0f);
    auto* v = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double p = second && i < int64_t(a_empty_.size()) && a_empty_[size_t(i)] ? 0.5 : 0.15;
      const bool empty = std::bernoulli_distribution(p)(rng);
      v[i] = empty ? -std::numeric_limits<float>::infinity() : value(rng);
      if (!second) a_empty_[size_t(i)] = empty;
    }
  }

  // Each element of out_a, out_b and out once, and the three LSEs.
  Work work(const HostCase& c) const override {
    const Tensor& a = *c.input("out_a");
    return {0, double(3 * a.numel() * int64_t(dtype_size(a.dtype())) + 3 * c.input("lse_a")->numel() * 4)};
  }

 private:
  static int64_t size(const std::string& text, const char* option) { return parse_int(text, option, 0, int64_t{1} << 40); }
  std::string t_ = "1024", h_ = "32", d_ = "128", batch_;
  mutable std::vector<bool> a_empty_;  // lse_a's -inf rows, for lse_b's fill
};

}  // namespace

OpCase* merge_attention_states_case() {
  static MergeAttentionStatesCase c;
  return &c;
}

EJK_REGISTER_CASE(merge_attention_states_case);

}  // namespace ejk::cli
