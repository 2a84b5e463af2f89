// `ejk run blocksparse_attention` and `ejk run blocksparse_attention_backward`: the problem's
// sizes (BHSD), a random block layout of about --density of the blocks (shared by every head, or
// one per head), with one query block row of the first head fully masked; random segment ids
// with a padded query tail; the backward's out and lse from the forward run on the CPU and a
// random d_out.
#include <algorithm>

#include "cases/flash_inputs.h"
#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class BlocksparseCase final : public OpCase {
 public:
  explicit BlocksparseCase(bool backward) : backward_(backward) {}
  const char* op() const override {
    return backward_ ? "blocksparse_attention_backward" : "blocksparse_attention";
  }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch");
    cmd.add_option("--sq", sq_, "Query length");
    cmd.add_option("--sk", sk_, "Key length");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "Key/value heads (divides hq)");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--bq", bq_, "Queries per layout block (q_blocksize, a multiple of 16)");
    cmd.add_option("--bk", bk_, "Keys per layout block (kv_blocksize, a multiple of 16)");
    cmd.add_option("--density", density_, "Fraction of layout blocks listed, in [0, 1]; 'none': no block_mask");
    cmd.add_flag("--per-head", per_head_, "One layout per query head (block_mask [B, Hq, NQ, NK])");
    cmd.add_flag("--causal", causal_, "Causal mask (top-left aligned)");
    cmd.add_option("--window", window_, "Sliding window: W or L,R");
    cmd.add_option("--softcap", softcap_, "Logit soft cap C > 0: C*tanh(s/C)");
    cmd.add_option("--scale", scale_, "Softmax scale (default 1/sqrt(D))");
    cmd.add_option("--num-sinks", sinks_, "Sinks per head (softmax_aux [Hq, N])");
    cmd.add_flag("--shared-sinks", shared_sinks_, "Sinks shared by every head (softmax_aux [N])");
    cmd.add_flag("--segments", segments_, "Random segment ids (with padding)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b", 1), sq = size(sq_, "--sq"), sk = size(sk_, "--sk"), hq = size(hq_, "--hq", 1),
                  hkv = size(hkv_, "--hkv", 1), d = size(d_, "--d", 1);
    const int64_t bq = size(bq_, "--bq", 16), bk = size(bk_, "--bk", 16);
    std::vector<InputSpec> in;
    in.push_back({"q", {b, hq, sq, d}, dtype});
    in.push_back({"k", {b, hkv, sk, d}, dtype});
    in.push_back({"v", {b, hkv, sk, d}, dtype});
    if (density_ != "none") {
      parse_float(density_, "--density");
      in.push_back({"block_mask", {b, per_head_ ? hq : 1, (sq + bq - 1) / bq, (sk + bk - 1) / bk}, DType::u8});
    }
    if (segments_) {
      in.push_back({"q_segment_ids", {b, sq}, DType::i32});
      in.push_back({"kv_segment_ids", {b, sk}, DType::i32});
    }
    const int64_t s = sinks_.empty() ? (shared_sinks_ ? 1 : 0) : parse_int(sinks_, "--num-sinks", 1, 1 << 20);
    if (s > 0) in.push_back({"softmax_aux", shared_sinks_ ? Dims{s} : Dims{hq, s}, DType::f32});
    if (backward_) {
      in.push_back({"out", {b, hq, sq, d}, dtype});
      in.push_back({"lse", {b, hq, sq}, DType::f32});
      in.push_back({"d_out", {b, hq, sq, d}, dtype});
    }
    return in;
  }

  void scalars(HostCase& c) const override {
    c.set("causal", causal_);
    c.set("q_blocksize", size(bq_, "--bq", 16));
    c.set("kv_blocksize", size(bk_, "--bk", 16));
    if (!window_.empty()) {
      const IntPair w = parse_int_pair(window_, "--window", 0, INT64_MAX);
      c.set("sliding_window", std::array<int64_t, 2>{w.first, w.second});
    }
    if (!softcap_.empty()) c.set("logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!scale_.empty()) c.set("softmax_scale", parse_float(scale_, "--scale"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "block_mask") {
      fill_layout(t, rng);
    } else if (name == "q_segment_ids" || name == "kv_segment_ids") {
      flash_inputs::backward_segment_ids(name, t, nseg_, rng);
    } else if (name == "out" || name == "lse") {
      forward_due_ = true;  // finish() runs the forward into them
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  void finish(HostCase& c) const override {
    if (!forward_due_) return;  // --load: the saved out and lse
    forward_due_ = false;
    flash_inputs::run_forward_into_saved("blocksparse_attention", c);
  }

  Work work(const HostCase& c) const override { return {call_flops(op(), c.args()), 0}; }

 private:
  static int64_t size(const std::string& text, const char* option, int64_t min = 0) {
    return parse_int(text, option, min, int64_t{1} << 40);
  }
  // Each block listed with probability --density; one query block row of head 0 (batch 0)
  // emptied, so fully masked rows are always part of the problem.
  void fill_layout(Tensor& t, std::mt19937_64& rng) const {
    const double density = parse_float(density_, "--density");
    if (!(density >= 0 && density <= 1))
      throw InvalidArgument("--density: expected a fraction in [0, 1] or 'none', got " + density_);
    std::bernoulli_distribution listed(density);
    auto* m = t.data_as<uint8_t>();
    for (int64_t i = 0; i < t.numel(); ++i) m[i] = listed(rng) ? 1 : 0;
    const int64_t nq = t.shape()[2], nk = t.shape()[3];
    if (nq > 1 && nk > 0) {
      const int64_t row = std::uniform_int_distribution<int64_t>(0, nq - 1)(rng);
      std::fill(m + row * nk, m + (row + 1) * nk, uint8_t(0));
    }
  }
  bool backward_;
  std::string b_ = "1", sq_ = "1024", sk_ = "1024", hq_ = "8", hkv_ = "8", d_ = "64", bq_ = "64", bk_ = "64";
  std::string density_ = "0.3", window_, softcap_, scale_, sinks_;
  bool per_head_ = false, causal_ = false, segments_ = false, shared_sinks_ = false;
  mutable int64_t nseg_ = 1;
  mutable bool forward_due_ = false;
};

}  // namespace

OpCase* blocksparse_attention_case() {
  static BlocksparseCase c(false);
  return &c;
}

OpCase* blocksparse_attention_backward_case() {
  static BlocksparseCase c(true);
  return &c;
}

EJK_REGISTER_CASE(blocksparse_attention_case);
EJK_REGISTER_CASE(blocksparse_attention_backward_case);

}  // namespace ejk::cli
