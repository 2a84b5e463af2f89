// `ejk run grouped_matmul` and `ejk run grouped_matmul_backward`: m rows of lhs cut into GS
// groups at random points (some empty; --rows below m leaves rows past the sizes' sum), G
// computed groups from --offset, weights stored transposed (--transpose), existing_out
// (--existing, forward).
#include <algorithm>

#include "op_case.h"
#include "parse.h"

namespace ejk::cli {

class GroupedMatmulCase final : public OpCase {
 public:
  explicit GroupedMatmulCase(bool backward) : backward_(backward) {}
  const char* op() const override { return backward_ ? "grouped_matmul_backward" : "grouped_matmul"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--m", m_, "Rows of lhs");
    cmd.add_option("--k", k_, "Inner dim K");
    cmd.add_option("--n", n_, "Output columns N");
    cmd.add_option("--groups", g_, "Computed groups G (rhs's)");
    cmd.add_option("--total-groups", gs_, "Groups in group_sizes, GS >= G (0: G)");
    cmd.add_option("--offset", offset_, "group_offset, in [0, GS - G] (-1: not given)");
    cmd.add_option("--rows", rows_, "Rows the group sizes sum to, at most m (-1: m)");
    cmd.add_flag("--transpose", transpose_, "Weights stored transposed: rhs_t [G, N, K]");
    if (!backward_) cmd.add_flag("--existing", existing_, "An existing_out to add");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t m = size(m_, "--m"), k = size(k_, "--k"), n = size(n_, "--n"), g = size(g_, "--groups");
    std::vector<InputSpec> in{{"lhs", {m, k}, dtype}};
    in.push_back(transpose_ ? InputSpec{"rhs_t", {g, n, k}, dtype} : InputSpec{"rhs", {g, k, n}, dtype});
    in.push_back({"group_sizes", {total_groups()}, DType::i32});
    if (offset() >= 0) in.push_back({"group_offset", {1}, DType::i32});
    if (existing_) in.push_back({"existing_out", {m, n}, DType::f32});
    if (backward_) in.push_back({"d_out", {m, n}, DType::f32});
    return in;
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "group_sizes") {
      const int64_t m = size(m_, "--m"), rows = rows_ == "-1" ? m : parse_int(rows_, "--rows", 0, m);
      std::vector<int64_t> cuts{0, rows};
      for (int64_t i = 1; i < t.numel(); ++i) cuts.push_back(std::uniform_int_distribution<int64_t>(0, rows)(rng));
      std::sort(cuts.begin(), cuts.end());
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = int32_t(cuts[size_t(i + 1)] - cuts[size_t(i)]);
    } else if (name == "group_offset") {
      t.data_as<int32_t>()[0] = int32_t(offset());
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  // 2 m K N for the forward (all rows computed at most), twice that for dlhs and drhs.
  Work work(const HostCase&) const override {
    const double mkn = double(size(m_, "--m")) * double(size(k_, "--k")) * double(size(n_, "--n"));
    return {mkn * (backward_ ? 4.0 : 2.0), 0};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 31);
  }
  int64_t total_groups() const {
    // More group sizes than this is no MoE layer; the case sorts that many cuts on the host.
    const int64_t gs = parse_int(gs_, "--total-groups", 0, int64_t{1} << 24);
    return gs == 0 ? size(g_, "--groups") : gs;
  }
  int64_t offset() const { return parse_int(offset_, "--offset", -1, int64_t{1} << 31); }

  bool backward_;
  std::string m_ = "1000", k_ = "256", n_ = "192", g_ = "8", gs_ = "0", offset_ = "-1", rows_ = "-1";
  bool transpose_ = false, existing_ = false;
};

OpCase* grouped_matmul_case() {
  static GroupedMatmulCase c(false);
  return &c;
}

OpCase* grouped_matmul_backward_case() {
  static GroupedMatmulCase c(true);
  return &c;
}

EJK_REGISTER_CASE(grouped_matmul_case);
EJK_REGISTER_CASE(grouped_matmul_backward_case);

}  // namespace ejk::cli
