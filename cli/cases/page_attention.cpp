// `ejk run page_attention`: a decode batch over a paged cache whose blocks are handed out in a
// random order (every table non-contiguous and shuffled), random context lengths in
// [0, --context] with the last sequence at --context, GQA by --hq / --hkv, and the bytes moved
// (the K and V positions read, the queries and the outputs).
#include <algorithm>

#include "op_case.h"
#include "paged_inputs.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class PageAttentionCase final : public OpCase {
 public:
  const char* op() const override { return "page_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--s", s_, "Sequences (one query token each)");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "KV heads");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--block-size", bs_, "Positions per cache block");
    cmd.add_option("--context", ctx_, "Longest context (the tables hold ceil(context / block size) blocks)");
    cmd.add_option("--softcap", softcap_, "attn_logits_soft_cap (default: none)");
    cmd.add_option("--window", window_, "sliding_window (default: none)");
    cmd.add_option("--splits", splits_, "num_splits (default 0: the heuristic's)");
    cmd.add_flag("--full", full_, "Every sequence at --context (a bandwidth run)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t s = size(s_, "--s"), hq = size(hq_, "--hq"), hkv = size(hkv_, "--hkv"), d = size(d_, "--d");
    const int64_t bs = std::max<int64_t>(1, size(bs_, "--block-size")), mb = blocks_per_seq();
    // A few blocks no table names, so the tables are a proper subset of the cache.
    const int64_t nb = s * mb + 3;
    return {{"query", {s, hq, d}, dtype},
            {"key_cache", {nb, hkv, bs, d}, dtype},
            {"value_cache", {nb, hkv, bs, d}, dtype},
            {"context_lens", {s}, DType::i32},
            {"block_tables", {s, mb}, DType::i32}};
  }

  void scalars(HostCase& c) const override {
    if (!softcap_.empty()) c.set("attn_logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!window_.empty()) c.set("sliding_window", size(window_, "--window"));
    if (!splits_.empty()) c.set("num_splits", size(splits_, "--splits"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "context_lens") {
      const int64_t ctx = size(ctx_, "--context");
      auto* len = t.data_as<int32_t>();
      for (int64_t s = 0; s < t.numel(); ++s)
        len[s] = full_ ? int32_t(ctx) : int32_t(std::uniform_int_distribution<int64_t>(0, ctx)(rng));
      if (t.numel() > 0) len[t.numel() - 1] = int32_t(ctx);
    } else if (name == "block_tables") {
      // Every block of the cache but the spare ones, shuffled, dealt out row by row.
      paged_inputs::fill_shuffled_pages(t, t.numel(), rng);
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  Work work(const HostCase& c) const override {
    const Tensor& q = *c.input("query");
    const Tensor& kc = *c.input("key_cache");
    const Tensor& lens = *c.input("context_lens");
    const double esize = double(dtype_size(q.dtype()));
    double positions = 0;
    const int64_t window = window_.empty() ? 0 : size(window_, "--window");
    for (int64_t s = 0; s < lens.numel(); ++s) {
      const int64_t n = lens.data_as<int32_t>()[s];
      positions += double(window > 0 ? std::min(n, window) : n);
    }
    const double row = double(kc.shape()[1] * kc.shape()[3]) * esize;  // one position, every kv head
    return {0, 2 * positions * row + 2 * double(q.numel()) * esize};
  }

 private:
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  int64_t blocks_per_seq() const {
    const int64_t bs = std::max<int64_t>(1, size(bs_, "--block-size"));
    return (size(ctx_, "--context") + bs - 1) / bs;
  }
  std::string s_ = "4", hq_ = "8", hkv_ = "2", d_ = "128", bs_ = "16", ctx_ = "500";
  std::string softcap_, window_, splits_;
  bool full_ = false;
};

}  // namespace

OpCase* page_attention_case() {
  static PageAttentionCase c;
  return &c;
}

EJK_REGISTER_CASE(page_attention_case);

}  // namespace ejk::cli
