// `ejk run prefill_page_attention`: one chunk of --chunk query tokens over a heads-first paged
// cache of --context positions (the chunk's included), pages handed out shuffled; GQA by --hq /
// --hkv; the bytes moved are the K and V rows read once, the queries and the output.
#include <algorithm>

#include "op_case.h"
#include "paged_inputs.h"
#include "parse.h"

namespace ejk::cli {
namespace {

int64_t count(const std::string& text, const char* option) { return parse_int(text, option, 0, int64_t{1} << 40); }

class PrefillPageCase final : public OpCase {
 public:
  const char* op() const override { return "prefill_page_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--chunk", chunk_, "Query tokens of the chunk");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--hkv", hkv_, "KV heads");
    cmd.add_option("--d", d_, "Head dim");
    cmd.add_option("--page-size", ps_, "Positions per cache page");
    cmd.add_option("--context", ctx_, "Context length, the chunk included (at least --chunk)");
    cmd.add_option("--softcap", softcap_, "attn_logits_soft_cap (default: none)");
    cmd.add_option("--window", window_, "sliding_window (default: none)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t hq = count(hq_, "--hq"), hkv = count(hkv_, "--hkv"), d = count(d_, "--d");
    const int64_t ps = page_size(), mb = (context() + ps - 1) / ps;
    return {{"query", {count(chunk_, "--chunk"), hq, d}, dtype},
            {"key_cache", {hkv, mb + 2, ps, d}, dtype},
            {"value_cache", {hkv, mb + 2, ps, d}, dtype},
            {"context_len", {1}, DType::i32},
            {"page_indices", {mb}, DType::i32}};
  }

  void scalars(HostCase& c) const override {
    if (!softcap_.empty()) c.set("attn_logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!window_.empty()) c.set("sliding_window", count(window_, "--window"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    if (name == "context_len") {
      t.data_as<int32_t>()[0] = int32_t(context());
    } else if (name == "page_indices") {
      paged_inputs::fill_shuffled_pages(t, t.numel() + 2, rng);
    } else {
      OpCase::fill(name, t, rng);
    }
  }

  Work work(const HostCase& c) const override {
    const Tensor& q = *c.input("query");
    const Tensor& kc = *c.input("key_cache");
    const double esize = double(dtype_size(q.dtype()));
    return {0, 2 * double(context()) * double(kc.shape()[0] * kc.shape()[3]) * esize + 2 * double(q.numel()) * esize};
  }

 private:
  int64_t page_size() const { return std::max<int64_t>(1, count(ps_, "--page-size")); }
  int64_t context() const { return std::max(count(ctx_, "--context"), count(chunk_, "--chunk")); }
  std::string chunk_ = "64", hq_ = "8", hkv_ = "2", d_ = "128", ps_ = "16", ctx_ = "300";
  std::string softcap_, window_;
};

}  // namespace

OpCase* prefill_page_attention_case() {
  static PrefillPageCase c;
  return &c;
}

EJK_REGISTER_CASE(prefill_page_attention_case);

}  // namespace ejk::cli
