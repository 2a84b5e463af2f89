// `ejk run recurrent_attention` and `ejk run recurrent_attention_backward`: the problem's sizes,
// which gates are given, an initial state, reverse, packed sequences of random lengths for
// --varlen; gates are log-sigmoids (decays in (0, 1), most near 1) so the state stays bounded.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

// n lengths summing to total, cut at random points (some may be empty).
std::vector<int32_t> random_lengths(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 1; i < n; ++i) cuts.push_back(std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  return {cuts.begin(), cuts.end()};
}

// Log decays in `t`'s dtype: log(sigmoid(x + 2)) for normal x (about 0.85 on average).
void fill_log_decay(Tensor& t, std::mt19937_64& rng) {
  Tensor f = Tensor::empty(t.shape(), DType::f32);
  std::normal_distribution<float> nd(2.0f, 1.0f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = -std::log1p(std::exp(-nd(rng)));
  const Tensor r = t.dtype() == DType::f32 ? f : from_f32(f, t.dtype());
  std::copy_n(static_cast<const char*>(r.data()), r.nbytes(), static_cast<char*>(t.data()));
}

class RecurrentCase final : public OpCase {
 public:
  explicit RecurrentCase(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "recurrent_attention_backward" : "recurrent_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch (varlen: number of sequences)");
    cmd.add_option("--t", t_, "Tokens per sequence (varlen: packed total)");
    cmd.add_option("--h", h_, "Heads");
    cmd.add_option("--k", k_, "Key dim K");
    cmd.add_option("--v", v_, "Value dim V");
    cmd.add_option("--gates", gates_, "Gates given, comma-separated: g, g_gamma, gk, gv, g_head (or none)");
    cmd.add_flag("--init", init_, "An initial state");
    cmd.add_flag("--reverse", reverse_, "Walk the sequences from their last token");
    cmd.add_flag("--varlen", varlen_, "Packed sequences of random lengths with cu_seqlens");
    if (backward_) cmd.add_flag("--dht", dht_, "A gradient of the final state");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), t = size(t_, "--t"), h = size(h_, "--h"), k = size(k_, "--k"),
                  v = size(v_, "--v");
    auto tokens = [&](int64_t x) { return varlen_ ? Dims{t, h, x} : Dims{b, t, h, x}; };
    std::vector<InputSpec> in{{"q", tokens(k), dtype}, {"k", tokens(k), dtype}, {"v", tokens(v), dtype}};
    for (const std::string& gate : gate_list()) {
      if (gate == "g_gamma") in.push_back({gate, {h}, DType::f32});
      else if (gate == "g_head") in.push_back({gate, varlen_ ? Dims{t, h} : Dims{b, t, h}, dtype});
      else in.push_back({gate, tokens(gate == "gv" ? v : k), dtype});
    }
    if (init_) in.push_back({"initial_state", {b, h, k, v}, DType::f32});
    if (varlen_) in.push_back({"cu_seqlens", {b + 1}, DType::i32});
    if (backward_) in.push_back({"d_o", tokens(v), dtype});
    if (backward_ && dht_) in.push_back({"d_final_state", {b, h, k, v}, DType::f32});
    return in;
  }

  void scalars(HostCase& c) const override {
    if (reverse_) c.set("reverse", true);
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "cu_seqlens") {
      const auto cu = random_lengths(t.numel() - 1, size(t_, "--t"), rng);
      std::copy(cu.begin(), cu.end(), t.data_as<int32_t>());
    } else if (name == "g" || name == "gk" || name == "gv" || name == "g_head") {
      fill_log_decay(t, rng);
    } else if (name == "g_gamma") {
      // Retention's per-head decays: 1 - 2^(-5 - h).
      for (int64_t h = 0; h < t.numel(); ++h) t.data_as<float>()[h] = float(std::log1p(-std::exp2(-5.0 - double(h))));
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  // Per token and head: the update and the output, 2 K V multiply-adds each (the backward
  // recomputes the states twice and makes five K x V passes).
  Work work(const HostCase& c) const override {
    const Tensor& v = *c.input("v");
    const int64_t tokens = v.numel() / v.shape().back(), kv = size(k_, "--k") * v.shape().back();
    return {double(tokens) * double(kv) * (backward_ ? 14.0 : 4.0), 0};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  std::vector<std::string> gate_list() const {
    std::vector<std::string> out;
    std::string cur;
    if (gates_ == "none") return out;
    for (char ch : gates_ + ",") {
      if (ch != ',') {
        cur += ch;
        continue;
      }
      if (cur.empty()) continue;
      if (cur != "g" && cur != "g_gamma" && cur != "gk" && cur != "gv" && cur != "g_head")
        throw InvalidArgument(
            fmt::format("--gates: expected a comma-separated list of g, g_gamma, gk, gv, g_head, got '{}'", cur));
      out.push_back(cur), cur.clear();
    }
    return out;
  }
  bool backward_;
  std::string b_ = "2", t_ = "256", h_ = "4", k_ = "64", v_ = "64", gates_ = "g_gamma,gk";
  bool init_ = false, reverse_ = false, varlen_ = false, dht_ = false;
};

}  // namespace

OpCase* recurrent_attention_case() {
  static RecurrentCase c(false);
  return &c;
}

OpCase* recurrent_attention_backward_case() {
  static RecurrentCase c(true);
  return &c;
}

EJK_REGISTER_CASE(recurrent_attention_case);
EJK_REGISTER_CASE(recurrent_attention_backward_case);

}  // namespace ejk::cli
