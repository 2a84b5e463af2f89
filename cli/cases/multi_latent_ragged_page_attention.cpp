// `ejk run multi_latent_ragged_page_attention`: a mixed batch over a paged latent cache whose
// pages are handed out shuffled: --decode sequences of one query token, then --prefill
// sequences of --chunk tokens, contexts random in [q_len, --context] (the last at --context),
// two spare table rows past the sequences processed, --hq query heads over one latent row of
// --r + --e; the page size rounded up to even, so the tables fit every dtype's packing. The
// bytes moved are the latent rows read once per sequence, the queries and the outputs.
#include <algorithm>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "op_case.h"
#include "paged_inputs.h"
#include "parse.h"

namespace ejk::cli {
namespace {

class MlaPageCase final : public OpCase {
 public:
  const char* op() const override { return "multi_latent_ragged_page_attention"; }

  void add_options(CaseOptions& cmd) override {
    cmd.add_option("--decode", decode_, "Sequences with one query token");
    cmd.add_option("--prefill", prefill_, "Sequences with --chunk query tokens");
    cmd.add_option("--chunk", chunk_, "Query tokens of a prefill sequence");
    cmd.add_option("--hq", hq_, "Query heads");
    cmd.add_option("--r", r_, "Latent dim (kv_lora_rank)");
    cmd.add_option("--e", e_, "Rotary dim (qk_rope_head_dim)");
    cmd.add_option("--page-size", ps_, "Positions per cache page (rounded up to even)");
    cmd.add_option("--context", ctx_, "Longest context, at least --chunk");
    cmd.add_option("--softcap", softcap_, "logits_soft_cap (default: none)");
    cmd.add_option("--window", window_, "sliding_window (default: none)");
    cmd.add_option("--v-scale", v_scale_, "v_scale (default: none)");
  }

  std::vector<InputSpec> inputs(DType dtype) const override {
    const int64_t n = seqs(), rows = n + kSpareRows, hq = size(hq_, "--hq"), r = size(r_, "--r"), e = size(e_, "--e");
    const int64_t ps = page_size(), mb = (context() + ps - 1) / ps, pages = product(rows, mb, "block_tables' entries") + 3;
    const int64_t pack = dtype == DType::f32 ? 1 : 2, kd = (r + 127) / 128 * 128 + (e + 127) / 128 * 128;
    return {{"queries_nope", {tokens(), hq, r}, dtype},
            {"queries_pe", {tokens(), hq, e}, dtype},
            {"keys_values", {tokens(), r}, dtype},
            {"keys_pe", {tokens(), e}, dtype},
            {"kv_cache", {pages, ps / pack, pack, kd}, dtype},
            {"kv_lens", {rows}, DType::i32},
            {"block_tables", {rows * mb}, DType::i32},
            {"query_start_loc", {rows + 1}, DType::i32},
            {"distribution", {3}, DType::i32}};
  }

  void scalars(HostCase& c) const override {
    if (!softcap_.empty()) c.set("logits_soft_cap", parse_float(softcap_, "--softcap"));
    if (!window_.empty()) c.set("sliding_window", size(window_, "--window"));
    if (!v_scale_.empty()) c.set("v_scale", parse_float(v_scale_, "--v-scale"));
  }

  void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const override {
    const int64_t n = seqs(), rows = n + kSpareRows;
    if (name == "distribution") {
      // The seed's [decode end, prefill end, sequences]: decode sequences come first here.
      auto* d = t.data_as<int32_t>();
      d[0] = int32_t(size(decode_, "--decode")), d[1] = int32_t(n), d[2] = int32_t(n);
    } else if (!paged_inputs::fill_ragged(name, "kv_lens", t, n, rows, context(), [this](int64_t s) { return q_len(s); },
                                         rng)) {
      OpCase::fill(name, t, rng);
    }
  }

  Work work(const HostCase& c) const override {
    const Tensor& q = *c.input("queries_nope");
    const Tensor& qp = *c.input("queries_pe");
    const Tensor& cache = *c.input("kv_cache");
    const Tensor& lens = *c.input("kv_lens");
    const double esize = double(dtype_size(q.dtype()));
    double positions = 0;
    for (int64_t s = 0; s < seqs(); ++s) positions += double(lens.data_as<int32_t>()[s]);
    return {0, positions * double(cache.shape()[3]) * esize + double(2 * q.numel() + qp.numel()) * esize};
  }

 private:
  static constexpr int64_t kSpareRows = 2;
  static int64_t size(const std::string& text, const char* option) {
    return parse_int(text, option, 0, int64_t{1} << 40);
  }
  int64_t seqs() const { return size(decode_, "--decode") + size(prefill_, "--prefill"); }
  int64_t q_len(int64_t s) const { return s < size(decode_, "--decode") ? 1 : size(chunk_, "--chunk"); }
  // a * b for option-derived sizes (each below 2^42), refused past 2^40 before it could overflow.
  static int64_t product(int64_t a, int64_t b, const char* what) {
    if (b > 0 && a > (int64_t{1} << 40) / b)
      throw InvalidArgument(fmt::format("{}: {} x {} is more than 2^40", what, a, b));
    return a * b;
  }
  int64_t tokens() const {
    return size(decode_, "--decode") + product(size(prefill_, "--prefill"), size(chunk_, "--chunk"), "--prefill x --chunk");
  }
  int64_t page_size() const { return std::max<int64_t>(2, (size(ps_, "--page-size") + 1) / 2 * 2); }
  int64_t context() const { return std::max(size(ctx_, "--context"), std::max<int64_t>(1, size(chunk_, "--chunk"))); }
  std::string decode_ = "4", prefill_ = "1", chunk_ = "17", hq_ = "16", r_ = "512", e_ = "64", ps_ = "16",
              ctx_ = "300";
  std::string softcap_, window_, v_scale_;
};

}  // namespace

OpCase* multi_latent_ragged_page_attention_case() {
  static MlaPageCase c;
  return &c;
}

EJK_REGISTER_CASE(multi_latent_ragged_page_attention_case);

}  // namespace ejk::cli
