// `ejk run nsa_selection_attention` and `ejk run nsa_selection_attention_backward`: the
// problem's sizes (BTHD), random block indices per (sequence, token, kv head) that mix the
// token's own block, earlier and later blocks, empty slots (-1) and repeated blocks, optional
// random block counts; the backward's out and lse from the forward run on the CPU and a random
// d_out (and d_lse).
#include <algorithm>
#include <cstdint>

#include "cases/flash_inputs.h"
#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class NsaSelectionCase final : public OpCase {
 public:
  explicit NsaSelectionCase(bool backward) : backward_(backward) {}
  const char* op() const override {
    return backward_ ? "nsa_selection_attention_backward" : "nsa_selection_attention";
  }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch");
    cmd.add_option("--t", t_, "Tokens per sequence");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "Key/value heads (divides hq)");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--s", s_, "Selected block slots per token");
    cmd.add_option("--bs", bs_, "Keys per block (block_size)");
    cmd.add_option("--scale", scale_, "Softmax scale (default 1/sqrt(D))");
    cmd.add_flag("--counts", counts_, "Random block_counts in [0, S] (else every slot counts)");
    if (backward_) cmd.add_flag("--d-lse", d_lse_, "A random gradient of lse too (d_lse)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), t = size(t_, "--t"), hq = size(hq_, "--hq", 1), hkv = size(hkv_, "--hkv", 1),
                  d = size(d_, "--d", 1), s = size(s_, "--s");
    size(bs_, "--bs", 1);
    std::vector<InputSpec> in;
    in.push_back({"q", {b, t, hq, d}, dtype});
    in.push_back({"k", {b, t, hkv, d}, dtype});
    in.push_back({"v", {b, t, hkv, d}, dtype});
    in.push_back({"block_indices", {b, t, hkv, s}, DType::i32});
    if (counts_) in.push_back({"block_counts", {b, t, hkv}, DType::i32});
    if (backward_) {
      in.push_back({"out", {b, t, hq, d}, dtype});
      in.push_back({"lse", {b, t, hq}, DType::f32});
      in.push_back({"d_out", {b, t, hq, d}, dtype});
      if (d_lse_) in.push_back({"d_lse", {b, t, hq}, DType::f32});
    }
    return in;
  }

  void scalars(HostCase& c) const override {
    c.set("block_size", size(bs_, "--bs", 1));
    if (!scale_.empty()) c.set("softmax_scale", parse_float(scale_, "--scale"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "block_indices") {
      fill_indices(t, rng);
    } else if (name == "block_counts") {
      const int64_t s = size(s_, "--s");
      std::uniform_int_distribution<int32_t> count(0, int32_t(std::min<int64_t>(s, INT32_MAX)));
      auto* c = t.data_as<int32_t>();
      for (int64_t i = 0; i < t.numel(); ++i) c[i] = count(rng);
    } else if (name == "out" || name == "lse") {
      forward_due_ = true;  // finish() runs the forward into them
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  void finish(HostCase& c) const override {
    if (!forward_due_) return;  // --load: the saved out and lse
    forward_due_ = false;
    // The forward sees its own inputs only (the backward's d_lse is none of them).
    HostCase f = c;
    f.inputs.erase(std::remove_if(f.inputs.begin(), f.inputs.end(), [](const auto& in) { return in.first == "d_lse"; }),
                   f.inputs.end());
    flash_inputs::run_forward_into_saved("nsa_selection_attention", f);
    for (auto& [name, t] : c.inputs)
      if (name == "out" || name == "lse") t = *f.input(name);
  }

  Work work(const HostCase& c) const override { return {call_flops(op(), c.args()), 0}; }

 private:
  static int64_t size(const std::string& text, const char* option, int64_t min = 0) {
    return parse_int(text, option, min, int64_t{1} << 40);
  }
  // Slot 0 is the token's own block 7 times in 8; the others any block of the sequence or -1,
  // so later blocks (ignored), repeats (attended once) and tokens without keys all occur.
  void fill_indices(Tensor& t, std::mt19937_64& rng) const {
    const int64_t bs = size(bs_, "--bs", 1), tokens = t.shape()[1], heads = t.shape()[2], slots = t.shape()[3];
    const int64_t blocks = (tokens + bs - 1) / bs;
    std::uniform_int_distribution<int64_t> any(-1, std::max<int64_t>(blocks - 1, 0));
    std::bernoulli_distribution own(0.875);
    auto* idx = t.data_as<int32_t>();
    for (int64_t row = 0; row < t.numel() / std::max<int64_t>(slots, 1); ++row) {
      const int64_t tok = row / heads % tokens;
      for (int64_t s = 0; s < slots; ++s)
        idx[row * slots + s] = int32_t(s == 0 && own(rng) ? tok / bs : any(rng));
    }
  }
  bool backward_;
  std::string b_ = "1", t_ = "4096", hq_ = "16", hkv_ = "1", d_ = "64", s_ = "16", bs_ = "64", scale_;
  bool counts_ = false, d_lse_ = false;
  mutable bool forward_due_ = false;
};

}  // namespace

OpCase* nsa_selection_attention_case() {
  static NsaSelectionCase c(false);
  return &c;
}

OpCase* nsa_selection_attention_backward_case() {
  static NsaSelectionCase c(true);
  return &c;
}

EJK_REGISTER_CASE(nsa_selection_attention_case);
EJK_REGISTER_CASE(nsa_selection_attention_backward_case);

}  // namespace ejk::cli
