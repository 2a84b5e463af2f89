// `ejk run ragged_page_attention_v2` and `ejk run unified_attention`: a mixed batch over a paged
// cache (v2: K and V interleaved on the head axis; unified: token-major K and V caches, ALiBi
// slopes with --alibi, a [--chunk, --chunk] query-query bias with --qq-bias, causal false with
// --non-causal) whose pages are
// handed out shuffled: --decode sequences of one query token, then --prefill
// sequences of --chunk tokens, contexts random in [q_len, --context] (the last at --context),
// two spare table rows past num_seqs, GQA by --hq / --hkv, sinks with --sinks; the bytes moved
// are the K and V rows read once per sequence, the queries and the outputs.
#include <algorithm>

#include "op_case.h"
#include "paged_inputs.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class RaggedPageCase final : public OpCase {
 public:
  explicit RaggedPageCase(bool unified) : unified_(unified) {}
  const char* op() const override { return unified_ ? "unified_attention" : "ragged_page_attention_v2"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--decode", decode_, "Sequences with one query token");
    cmd.add_option("--prefill", prefill_, "Sequences with --chunk query tokens");
    cmd.add_option("--chunk", chunk_, "Query tokens of a prefill sequence");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "KV heads");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--page-size", ps_, "Positions per cache page");
    cmd.add_option("--context", ctx_, "Longest context, at least --chunk");
    cmd.add_option("--softcap", softcap_, "logits_soft_cap (default: none)");
    cmd.add_option("--window", window_, "sliding_window (default: none)");
    cmd.add_flag("--sinks", sinks_, "Pass softmax_aux (one sink per query head)");
    if (!unified_) return;
    cmd.add_flag("--alibi", alibi_, "Pass alibi_slopes (one per query head)");
    cmd.add_flag("--qq-bias", qq_bias_, "Pass qq_bias ([--chunk, --chunk])");
    cmd.add_flag("--non-causal", non_causal_, "causal false: every query sees its whole context");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t n = seqs(), rows = n + kSpareRows, hq = size(hq_, "--hq"), hkv = size(hkv_, "--hkv");
    const int64_t d = size(d_, "--d"), ps = page_size(), mb = (context() + ps - 1) / ps;
    const int64_t pages = rows * mb + 3;
    std::vector<InputSpec> in = {{"queries", {tokens(), hq, d}, dtype}};
    if (unified_)
      in.insert(in.end(), {{"key_cache", {pages, ps, hkv, d}, dtype}, {"value_cache", {pages, ps, hkv, d}, dtype}});
    else
      in.push_back({"kv_pages", {pages, ps, 2 * hkv, d}, dtype});
    in.insert(in.end(), {{lens_name(), {rows}, DType::i32},
                         {"block_tables", {rows, mb}, DType::i32},
                         {"query_start_loc", {rows + 1}, DType::i32}});
    if (!unified_) in.push_back({"num_seqs", {1}, DType::i32});
    if (sinks_) in.push_back({"softmax_aux", {hq}, DType::f32});
    if (alibi_) in.push_back({"alibi_slopes", {hq}, DType::f32});
    const int64_t nq = std::max<int64_t>(1, size(chunk_, "--chunk"));
    if (qq_bias_) in.push_back({"qq_bias", {nq, nq}, DType::f32});
    return in;
  }

  void scalars(HostCase& c) const override {
    if (!softcap_.empty()) c.set("logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!window_.empty()) c.set("sliding_window", size(window_, "--window"));
    if (non_causal_) c.set("causal", false);
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    const int64_t n = seqs(), rows = n + kSpareRows;
    if (name == "num_seqs") {
      t.data_as<int32_t>()[0] = int32_t(n);
    } else if (!paged_inputs::fill_ragged(name, lens_name(), t, n, rows, context(), [this](int64_t s) { return q_len(s); },
                                         rng)) {
      OpCase::fill(name, t, rng);
    }
  }

  Work work(const HostCase& c) const override {
    const Tensor& q = *c.input("queries");
    const Tensor& kv = *c.input(unified_ ? "key_cache" : "kv_pages");
    const Tensor& lens = *c.input(lens_name());
    const double esize = double(dtype_size(q.dtype()));
    double positions = 0;
    for (int64_t s = 0; s < seqs(); ++s) positions += double(lens.data_as<int32_t>()[s]);
    // One position: K and V of every kv head (the unified caches hold them in two tensors).
    const double row = double((unified_ ? 2 : 1) * kv.shape()[2] * kv.shape()[3]) * esize;
    return {0, positions * row + 2 * double(q.numel()) * esize};
  }

 private:
  static constexpr int64_t kSpareRows = 2;
  const char* lens_name() const { return unified_ ? "kv_lens" : "context_lens"; }
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  int64_t seqs() const { return size(decode_, "--decode") + size(prefill_, "--prefill"); }
  int64_t q_len(int64_t s) const { return s < size(decode_, "--decode") ? 1 : size(chunk_, "--chunk"); }
  int64_t tokens() const { return size(decode_, "--decode") + size(prefill_, "--prefill") * size(chunk_, "--chunk"); }
  int64_t page_size() const { return std::max<int64_t>(1, size(ps_, "--page-size")); }
  int64_t context() const { return std::max(size(ctx_, "--context"), std::max<int64_t>(1, size(chunk_, "--chunk"))); }
  std::string decode_ = "3", prefill_ = "2", chunk_ = "37", hq_ = "8", hkv_ = "2", d_ = "128", ps_ = "16",
              ctx_ = "300";
  std::string softcap_, window_;
  bool unified_, sinks_ = false, alibi_ = false, qq_bias_ = false, non_causal_ = false;
};

}  // namespace

OpCase* ragged_page_attention_v2_case() {
  static RaggedPageCase c(false);
  return &c;
}

OpCase* unified_attention_case() {
  static RaggedPageCase c(true);
  return &c;
}

EJK_REGISTER_CASE(ragged_page_attention_v2_case);
EJK_REGISTER_CASE(unified_attention_case);

}  // namespace ejk::cli
