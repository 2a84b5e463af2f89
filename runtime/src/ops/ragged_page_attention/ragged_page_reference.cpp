// The float64 reference of the ragged paged attention family (ragged_page_attention_v2,
// prefill_page_attention, unified_attention, decode_attention): ragged_page_params.h's semantics in double,
// each visible position's key and value read through the cache's strides and the page table,
// with a plain two-pass softmax (the sink in the denominator), into a contiguous output.
#include <cmath>
#include <vector>

#include "engine/elements.h"
#include "ops/ragged_page_attention/ragged_page_op.h"

namespace ejk::ops {

void ragged_page_reference(const RaggedPageParams& p, const TensorView& q, const TensorView& k, const TensorView& v,
                           int64_t v_offset, double* o, double* lse) {
  const int64_t group = p.q_heads / p.kv_heads, D = p.head_dim;
  std::vector<double> logits;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const RaggedSpan span = ragged_span(p, t);
    for (int64_t h = 0; h < p.q_heads; ++h) {
      double* orow = o + (t * p.q_heads + h) * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = 0;
      if (lse) lse[t * p.q_heads + h] = p.sinks ? double(p.sinks[h]) : -INFINITY;
      if (span.end <= span.begin) continue;
      const int64_t g = h / group;
      // Element offsets of position j's key in k and its value in v.
      auto row_at = [&](int64_t j, bool value) {
        const int64_t page = p.block_tables[span.seq * p.bt_ss + j / p.page_size], slot = j % p.page_size;
        return value ? v_offset + page * p.v_sp + slot * p.v_ss + g * p.v_sh : page * p.k_sp + slot * p.k_ss + g * p.k_sh;
      };
      logits.assign(size_t(span.end - span.begin), 0.0);
      double m = p.sinks ? double(p.sinks[h]) : -INFINITY;
      for (int64_t j = span.begin; j < span.end; ++j) {
        double x = 0;
        for (int64_t d = 0; d < D; ++d)
          x += engine::read_as_double(q, t * p.q_st + h * p.q_sh + d) * engine::read_as_double(k, row_at(j, false) + d);
        x *= double(p.scale);
        const int64_t r = j - span.ctx;
        if (p.alibi) x += double(p.alibi[h]) * double(r);
        if (p.qq_bias && r >= 0 && r < p.qq_n && span.qi < p.qq_n) x += double(p.qq_bias[span.qi * p.qq_n + r]);
        if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
        logits[size_t(j - span.begin)] = x, m = std::max(m, x);
      }
      double sum = p.sinks ? std::exp(double(p.sinks[h]) - m) : 0.0;
      for (double& x : logits) sum += (x = std::exp(x - m));
      if (lse) lse[t * p.q_heads + h] = m + std::log(sum);
      for (int64_t j = span.begin; j < span.end; ++j) {
        const double w = logits[size_t(j - span.begin)] / sum;
        for (int64_t d = 0; d < D; ++d) orow[d] += w * engine::read_as_double(v, row_at(j, true) + d);
      }
    }
  }
}

void RaggedPageAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  // V of kv head g is one head row after its K: the same tensor, one row further.
  const TensorView& kv = b.tensor(kv_pages);
  ragged_page_reference(params(b), b.tensor(queries), kv, kv, b.stride(kv_pages, 2), outputs[out], nullptr);
}

}  // namespace ejk::ops
