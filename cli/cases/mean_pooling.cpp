// `ejk run mean_pooling` and `ejk run mean_pooling_backward`: the problem's sizes, packed
// sequences of random lengths (about a quarter of them empty) for --varlen, and the bytes moved.
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

// n lengths summing to total: about a quarter empty (one at least, when n > 1), the others cut
// at random points.
std::vector<int32_t> random_cu_seqlens(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<bool> empty(size_t(n), false);
  for (int64_t i = 0; i < n; ++i) empty[size_t(i)] = std::bernoulli_distribution(0.25)(rng);
  if (n > 1) empty[size_t(std::uniform_int_distribution<int64_t>(0, n - 1)(rng))] = true;
  const int64_t filled = std::count(empty.begin(), empty.end(), false);
  if (filled == 0 && total > 0) empty[size_t(n - 1)] = false;
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 1; i < std::max<int64_t>(filled, 1); ++i)
    cuts.push_back(std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cu{0};
  size_t next = 1;
  for (int64_t i = 0; i < n; ++i) cu.push_back(int32_t(empty[size_t(i)] ? cu.back() : cuts[next++]));
  cu.back() = int32_t(total);  // the last sequence ends the tokens
  return cu;
}

class MeanPoolingCase final : public OpCase {
 public:
  explicit MeanPoolingCase(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "mean_pooling_backward" : "mean_pooling"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch (varlen: number of sequences)");
    cmd.add_option("--t", t_, "Tokens per sequence (varlen: packed total)");
    cmd.add_option("--d", d_, "Columns");
    cmd.add_flag("--varlen", varlen_, "Packed sequences of random lengths, some empty, with cu_seqlens");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), t = size(t_, "--t"), d = size(d_, "--d");
    if (varlen_ && b == 0 && t > 0)
      throw InvalidArgument(fmt::format("--b 0 --varlen: no sequence can hold the --t {} tokens (give --b >= 1)", t));
    std::vector<InputSpec> in;
    if (backward_) in.push_back({"g", {b, d}, dtype});
    else in.push_back({"x", varlen_ ? Dims{t, d} : Dims{b, t, d}, dtype});
    if (varlen_) in.push_back({"cu_seqlens", {b + 1}, DType::i32});
    return in;
  }

  void scalars(HostCase& c) const override {
    if (backward_) c.set("num_tokens", size(t_, "--t"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name != "cu_seqlens") return OpCase::fill(name, t, rng);
    const auto cu = random_cu_seqlens(t.numel() - 1, size(t_, "--t"), rng);
    std::copy(cu.begin(), cu.end(), t.data_as<int32_t>());
  }

  // Each token read (forward) or written (backward) once, each row once, and cu_seqlens.
  Work work(const HostCase& c) const override {
    const Tensor& in = *c.input(backward_ ? "g" : "x");
    const int64_t d = in.shape().back(), esize = int64_t(dtype_size(in.dtype()));
    const Tensor* cu = c.input("cu_seqlens");
    const int64_t t = size(t_, "--t"), b = size(b_, "--b"), tokens = cu ? t : b * t;
    return {0, double((tokens + b) * d * esize + (cu ? cu->numel() * 4 : 0))};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  bool backward_;
  std::string b_ = "4", t_ = "4096", d_ = "1024";
  bool varlen_ = false;
};

}  // namespace

OpCase* mean_pooling_case() {
  static MeanPoolingCase c(false);
  return &c;
}

OpCase* mean_pooling_backward_case() {
  static MeanPoolingCase c(true);
  return &c;
}

EJK_REGISTER_CASE(mean_pooling_case);
EJK_REGISTER_CASE(mean_pooling_backward_case);

}  // namespace ejk::cli
