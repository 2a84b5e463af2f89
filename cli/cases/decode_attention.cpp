// `ejk run decode_attention`: --b sequences of one query token over a flat token-major buffer
// of shuffled pages (--page-size positions each, a few spare), contexts random in [0, --context]
// (the last at --context, the first empty with --empty), GQA by --hq / --hkv, softcap with
// --softcap; the bytes moved are the K and V rows read once per sequence, the queries, the
// outputs and the log-sum-exps.
#include <algorithm>

#include "op_case.h"
#include "paged_inputs.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class DecodeAttentionCase final : public OpCase {
 public:
  const char* op() const override { return "decode_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--b", b_, "Sequences (one query token each)");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "KV heads");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--page-size", ps_, "Positions per page (the seed's default is 1)");
    cmd.add_option("--context", ctx_, "Longest context");
    cmd.add_option("--softcap", softcap_, "logits_soft_cap (default: none)");
    cmd.add_flag("--empty", empty_, "The first sequence's context is empty");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t b = size(b_, "--b"), hkv = size(hkv_, "--hkv"), d = size(d_, "--d"), ps = page_size();
    const int64_t rows = total_pages() * ps;
    return {{"query", {b, size(hq_, "--hq"), d}, dtype},
            {"key_buffer", {rows, hkv, d}, dtype},
            {"value_buffer", {rows, hkv, d}, dtype},
            {"req_to_tokens", {b, max_pages()}, DType::i32},
            {"seq_lens", {b}, DType::i32}};
  }

  void scalars(HostCase& c) const override {
    c.set("page_size", page_size());
    if (!softcap_.empty()) c.set("logits_soft_cap", parse_float(softcap_, "--softcap"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    const int64_t b = size(b_, "--b");
    if (name == "seq_lens") {
      auto* len = t.data_as<int32_t>();
      for (int64_t s = 0; s < b; ++s) len[s] = int32_t(std::uniform_int_distribution<int64_t>(0, context())(rng));
      if (b > 0) len[b - 1] = int32_t(context());
      if (b > 0 && empty_) len[0] = 0;
    } else if (name == "req_to_tokens") {
      // Distinct pages, shuffled, out of a buffer with spare pages nobody reads.
      paged_inputs::fill_shuffled_pages(t, total_pages(), rng);
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  Work work(const HostCase& c) const override {
    const Tensor& q = *c.input("query");
    const Tensor& kb = *c.input("key_buffer");
    const Tensor& lens = *c.input("seq_lens");
    const double esize = double(dtype_size(q.dtype()));
    double positions = 0;
    for (int64_t s = 0; s < size(b_, "--b"); ++s) positions += double(lens.data_as<int32_t>()[s]);
    const double row = double(2 * kb.shape()[1] * kb.shape()[2]) * esize;  // K and V of every kv head
    const double per_query = double(q.shape()[1]) * (2 * double(q.shape()[2]) * esize + 4);
    return {0, positions * row + double(q.shape()[0]) * per_query};
  }

 private:
  static constexpr int64_t kSparePages = 3;
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  int64_t page_size() const { return std::max<int64_t>(1, size(ps_, "--page-size")); }
  int64_t context() const { return size(ctx_, "--context"); }
  int64_t max_pages() const { return std::max<int64_t>(1, (context() + page_size() - 1) / page_size()); }
  int64_t total_pages() const { return size(b_, "--b") * max_pages() + kSparePages; }
  std::string b_ = "4", hq_ = "8", hkv_ = "2", d_ = "128", ps_ = "1", ctx_ = "300", softcap_;
  bool empty_ = false;
};

}  // namespace

OpCase* decode_attention_case() {
  static DecodeAttentionCase c;
  return &c;
}

EJK_REGISTER_CASE(decode_attention_case);

}  // namespace ejk::cli
