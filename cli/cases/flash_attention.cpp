// `ejk run flash_attention`: the problem's options, random inputs (segment ids in runs with a
// padded tail, packed lengths that sum to the totals), and the work the op counts.
#include <algorithm>
#include <cstdint>

#include "cases/flash_inputs.h"
#include "ejk/admin.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli {
namespace {

using flash_inputs::longest, flash_inputs::random_cum, flash_inputs::random_segments;

class FlashAttentionCase final : public OpCase {
 public:
  const char* op() const override { return "flash_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Batch (varlen: number of sequences)");
    cmd.add_option("--sq", sq_, "Query length (varlen: packed total)");
    cmd.add_option("--sk", sk_, "Key length (varlen: packed total)");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "Key/value heads (divides hq)");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_flag("--causal", causal_, "Causal mask (top-left aligned)");
    cmd.add_option("--window", window_, "Sliding window: W or L,R");
    cmd.add_option("--softcap", softcap_, "Logit soft cap C > 0: C*tanh(s/C)");
    cmd.add_option("--scale", scale_, "Softmax scale (default 1/sqrt(D))");
    cmd.add_option("--dropout-prob", dropout_prob_, "Dropout probability p in [0, 1) of the attention weights");
    cmd.add_option("--dropout-seed", dropout_seed_, "Dropout seed (the Philox key)");
    cmd.add_flag("--sinks", sinks_flag_, "Random attention sinks: one per head, softmax_aux [Hq, 1]");
    cmd.add_option("--num-sinks", sinks_, "Sinks per head (softmax_aux [Hq, N])");
    cmd.add_flag("--shared-sinks", shared_sinks_, "Sinks shared by every head (softmax_aux [N], as the seed's 1-D form)");
    cmd.add_flag("--segments", segments_, "Random segment ids (with padding)");
    cmd.add_flag("--varlen", varlen_, "Packed variable-length sequences");
    cmd.add_flag("--bias", bias_, "Random additive bias [B, Hq, Sq, Sk]");
    cmd.add_option("--mask-density", mask_density_,
                   "Random dense attention_mask [B, Hq, Sq, Sk]: each pair visible with probability P");
    cmd.add_flag("--mask-shared-heads", mask_shared_heads_, "The dense mask as [B, 1, Sq, Sk], broadcast over heads");
    cmd.add_flag("--no-normalize", no_normalize_, "normalize_output = false");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b", 1), sq = size(sq_, "--sq"), sk = size(sk_, "--sk"), hq = size(hq_, "--hq", 1),
                  hkv = size(hkv_, "--hkv", 1), d = size(d_, "--d", 1);
    std::vector<InputSpec> in;
    const Dims q = varlen_ ? Dims{sq, hq, d} : Dims{b, sq, hq, d}, kv = varlen_ ? Dims{sk, hkv, d} : Dims{b, sk, hkv, d};
    in.push_back({"q", q, dtype});
    in.push_back({"k", kv, dtype});
    in.push_back({"v", kv, dtype});
    if (bias_) in.push_back({"bias", {b, hq, sq, sk}, dtype});
    if (segments_) {
      in.push_back({"q_segment_ids", {b, sq}, DType::i32});
      in.push_back({"kv_segment_ids", {b, sk}, DType::i32});
    }
    if (varlen_) {
      in.push_back({"cum_seqlens_q", {b + 1}, DType::i32});
      in.push_back({"cum_seqlens_k", {b + 1}, DType::i32});
    }
    const int64_t s = sinks_.empty() ? (sinks_flag_ || shared_sinks_ ? 1 : 0) : parse_int(sinks_, "--num-sinks", 1, 1 << 20);
    if (s > 0) in.push_back({"softmax_aux", shared_sinks_ ? Dims{s} : Dims{hq, s}, DType::f32});
    if (!mask_density_.empty()) in.push_back({"attention_mask", {b, mask_shared_heads_ ? 1 : hq, sq, sk}, DType::u8});
    return in;
  }

  void scalars(HostCase& c) const override {
    c.set("causal", causal_);
    c.set("normalize_output", !no_normalize_);
    if (!window_.empty()) {
      const IntPair w = parse_int_pair(window_, "--window", 0, INT64_MAX);
      c.set("sliding_window", std::array<int64_t, 2>{w.first, w.second});
    }
    if (!softcap_.empty()) c.set("logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!scale_.empty()) c.set("softmax_scale", parse_float(scale_, "--scale"));
    if (!dropout_prob_.empty()) c.set("dropout_prob", parse_float(dropout_prob_, "--dropout-prob"));
    if (!dropout_seed_.empty()) c.set("dropout_seed", parse_int(dropout_seed_, "--dropout-seed", INT64_MIN, INT64_MAX));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "cum_seqlens_q" || name == "cum_seqlens_k") {
      const auto cum = random_cum(t.numel() - 1, name == "cum_seqlens_q" ? size(sq_, "--sq") : size(sk_, "--sk"), rng);
      std::copy(cum.begin(), cum.end(), t.data_as<int32_t>());
    } else if (name == "attention_mask") {
      flash_inputs::random_mask(t, flash_inputs::mask_density(mask_density_), rng);
    } else if (name == "q_segment_ids" || name == "kv_segment_ids") {
      // Both tensors share one segment count: a query's segment has keys.
      const bool q = name == "q_segment_ids";
      if (q) nseg_ = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      random_segments(t, nseg_, rng, [&](int64_t len) {  // q's may end in padding
        return q && len > 2 ? std::uniform_int_distribution<int64_t>(0, len / 4)(rng) : 0;
      });
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  void finish(HostCase& c) const override {
    // Varlen: the longest sequences, as a framework passes them (no device-to-host read).
    if (const Tensor* cq = c.input("cum_seqlens_q")) c.set("max_seqlen_q", longest(*cq));
    if (const Tensor* ck = c.input("cum_seqlens_k")) c.set("max_seqlen_k", longest(*ck));
  }

  // The op counts its FLOPs (the mask's visible pairs); the case knows no mask rule.
  Work work(const HostCase& c) const override { return {call_flops(op(), c.args()), 0}; }

 private:
  static int64_t size(const std::string& text, const char* option, int64_t min = 0) {
    return parse_int(text, option, min, int64_t{1} << 40);
  }
  std::string b_ = "1", sq_ = "512", sk_ = "512", hq_ = "8", hkv_ = "8", d_ = "128", sinks_;
  std::string window_, softcap_, scale_, dropout_prob_, dropout_seed_;
  std::string mask_density_;
  bool mask_shared_heads_ = false;
  bool causal_ = false, segments_ = false, varlen_ = false, bias_ = false, no_normalize_ = false;
  bool sinks_flag_ = false, shared_sinks_ = false;
  mutable int64_t nseg_ = 1;
};

}  // namespace

OpCase* flash_attention_case() {
  static FlashAttentionCase c;
  return &c;
}

EJK_REGISTER_CASE(flash_attention_case);

}  // namespace ejk::cli
