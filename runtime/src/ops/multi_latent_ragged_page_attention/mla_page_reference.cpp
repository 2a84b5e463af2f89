// The float64 reference of multi_latent_ragged_page_attention: mla_page_params.h's semantics in
// double, each visible position's latent row and rope key read through the cache's strides and
// the page table (or from this call's keys), with a plain two-pass softmax, into a contiguous
// [T, Hq, R] output.
#include <cmath>
#include <vector>

#include "engine/elements.h"
#include "ops/multi_latent_ragged_page_attention/mla_page_op.h"

namespace ejk::ops {

void MlaPageAttentionOp::reference(const engine::Bound& b, double* const* outputs) const {
  const MlaPageParams p = params(b);
  const TensorView &qn = b.tensor(queries_nope), &qp = b.tensor(queries_pe), &cache = b.tensor(kv_cache);
  const TensorView &nc = b.tensor(keys_values), &np = b.tensor(keys_pe);
  const int64_t R = p.latent, E = p.rope;
  double* o = outputs[out];
  std::vector<double> logits;
  for (int64_t t = 0; t < p.tokens; ++t) {
    const MlaSpan span = mla_span(p, t);
    for (int64_t h = 0; h < p.q_heads; ++h) {
      double* orow = o + (t * p.q_heads + h) * R;
      for (int64_t d = 0; d < R; ++d) orow[d] = 0;
      if (span.end <= span.begin) continue;
      logits.assign(size_t(span.end - span.begin), 0.0);
      double m = -INFINITY;
      for (int64_t j = span.begin; j < span.end; ++j) {
        const MlaRow r = mla_row(p, span, j);
        const TensorView &c = r.fresh ? nc : cache, &pe = r.fresh ? np : cache;
        double x = 0;
        for (int64_t d = 0; d < R; ++d)
          x += engine::read_as_double(qn, t * p.qn_st + h * p.qn_sh + d) * engine::read_as_double(c, r.c + d);
        for (int64_t d = 0; d < E; ++d)
          x += engine::read_as_double(qp, t * p.qp_st + h * p.qp_sh + d) * engine::read_as_double(pe, r.pe + d);
        x *= double(p.scale);
        if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
        logits[size_t(j - span.begin)] = x, m = std::max(m, x);
      }
      double sum = 0;
      for (double& x : logits) sum += (x = std::exp(x - m));
      for (int64_t j = span.begin; j < span.end; ++j) {
        const MlaRow r = mla_row(p, span, j);
        const TensorView& c = r.fresh ? nc : cache;
        const double w = double(p.v_scale) * logits[size_t(j - span.begin)] / sum;
        for (int64_t d = 0; d < R; ++d) orow[d] += w * engine::read_as_double(c, r.c + d);
      }
    }
  }
}

}  // namespace ejk::ops
