// The float64 reference of page_attention: page_attention_params.h's semantics in double, each
// position's key and value read through the caches' own strides and the page table, with a
// plain two-pass softmax (no tiling, no splits), into a contiguous output.
#include <cmath>
#include <vector>

#include "engine/elements.h"
#include "ops/page_attention/page_op.h"

namespace ejk::ops {

void PageAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  const PageAttentionParams p = params(b);
  const TensorView &q = b.tensor(query), &kc = b.tensor(key_cache), &vc = b.tensor(value_cache);
  const int64_t group = p.q_heads / p.kv_heads, D = p.head_dim;
  double* o = outputs[out];
  std::vector<double> logits;
  for (int64_t s = 0; s < p.seqs; ++s) {
    const PageSpan span = page_span(p, s);
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const int64_t g = h / group;
      auto row = [&](int64_t j, bool value) {
        const int64_t blk = p.block_tables[s * p.bt_ss + j / p.block_size], slot = j % p.block_size;
        return value ? blk * p.v_sb + g * p.v_sh + slot * p.v_st : blk * p.k_sb + g * p.k_sh + slot * p.k_st;
      };
      logits.assign(size_t(span.end - span.begin), 0.0);
      double m = -INFINITY;
      for (int64_t j = span.begin; j < span.end; ++j) {
        double x = 0;
        for (int64_t d = 0; d < D; ++d)
          x += engine::read_as_double(q, s * p.q_ss + h * p.q_sh + d) * engine::read_as_double(kc, row(j, false) + d);
        x *= double(p.scale);
        if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
        logits[size_t(j - span.begin)] = x, m = std::max(m, x);
      }
      double sum = 0;
      for (double& x : logits) sum += (x = std::exp(x - m));
      double* orow = o + (s * p.q_heads + h) * D;
      for (int64_t d = 0; d < D; ++d) orow[d] = 0;
      for (int64_t j = span.begin; j < span.end; ++j) {
        const double w = logits[size_t(j - span.begin)] / sum;
        for (int64_t d = 0; d < D; ++d) orow[d] += w * engine::read_as_double(vc, row(j, true) + d);
      }
    }
  }
}

}  // namespace ejk::ops
