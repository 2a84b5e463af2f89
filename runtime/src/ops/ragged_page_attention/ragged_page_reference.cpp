// The float64 reference of ragged_page_attention_v2: ragged_page_params.h's semantics in double,
// each visible position's key and value read through the cache's strides and the page table,
// with a plain two-pass softmax (the sink in the denominator), into a contiguous output.
#include <cmath>
#include <vector>

#include "engine/elements.h"
#include "ops/ragged_page_attention/ragged_page_op.h"

namespace ejk::ops {

void RaggedPageAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  const RaggedPageParams p = params(b);
  const TensorView &q = b.tensor(queries), &kv = b.tensor(kv_pages);
  const int64_t group = p.q_heads / p.kv_heads, D = p.head_dim, row = b.stride(kv_pages, 2);
  double* o = outputs[out];
  std::vector<double> logits;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const RaggedSpan span = ragged_span(p, t);
    for (int64_t h = 0; h < p.q_heads; ++h) {
      double* orow = o + (t * p.q_heads + h) * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = 0;
      if (span.end <= span.begin) continue;
      const int64_t g = h / group;
      // Element offsets in kv_pages of position j's key (V is one head row further).
      auto key_at = [&](int64_t j) {
        const int64_t page = p.block_tables[span.seq * p.bt_ss + j / p.page_size];
        return page * p.k_sp + (j % p.page_size) * p.k_ss + g * p.k_sh;
      };
      logits.assign(size_t(span.end - span.begin), 0.0);
      double m = p.sinks ? double(p.sinks[h]) : -INFINITY;
      for (int64_t j = span.begin; j < span.end; ++j) {
        double x = 0;
        for (int64_t d = 0; d < D; ++d)
          x += engine::read_as_double(q, t * p.q_st + h * p.q_sh + d) * engine::read_as_double(kv, key_at(j) + d);
        x *= double(p.scale);
        if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
        logits[size_t(j - span.begin)] = x, m = std::max(m, x);
      }
      double sum = p.sinks ? std::exp(double(p.sinks[h]) - m) : 0.0;
      for (double& x : logits) sum += (x = std::exp(x - m));
      for (int64_t j = span.begin; j < span.end; ++j) {
        const double w = logits[size_t(j - span.begin)] / sum;
        for (int64_t d = 0; d < D; ++d) orow[d] += w * engine::read_as_double(kv, key_at(j) + row + d);
      }
    }
  }
}

}  // namespace ejk::ops
