// The float64 reference of merge_attention_states: the merge rule of merge_states_params.h in
// double, walking each tensor through its own shape and strides (none of the kernels' flattening
// of leading dims), into contiguous outputs.
#include <cmath>
#include <cstdint>
#include <string>

#include "ejk/core/error.h"
#include "engine/elements.h"
#include "engine/op_def.h"
#include "ops/merge_attention_states/merge_op.h"

namespace ejk::ops {
namespace {

struct DoubleMath {
  double exp(double x) const { return std::exp(x); }
  double log(double x) const { return std::log(x); }
  double rcp(double x) const { return 1.0 / x; }
};

double read(const TensorView& t, int64_t index) { return engine::read_as_double(t, index); }

// Offset of leading index `l` (row-major over the leading dims) in t, through t's strides.
int64_t lead_offset(const TensorView& t, const Dims& lead, int64_t l) {
  int64_t off = 0;
  for (int64_t d = lead.size() - 1; d >= 0; --d) off += (l % lead[d]) * t.strides[d], l /= lead[d];
  return off;
}

}  // namespace

void MergeAttentionStatesOp::reference(const engine::Bound& b, double* const* outputs) const {
  const TensorView &a = b.tensor(out_a), &bt = b.tensor(out_b), &la = b.tensor(lse_a), &lb = b.tensor(lse_b);
  const int64_t T = b.size(sym_T), H = b.size(sym_H), D = b.size(sym_D), r = b.lead.size();
  int64_t leads = 1;
  for (int64_t n : b.lead) leads *= n;
  double* o = outputs[out];
  double* l = outputs[lse];
  for (int64_t i = 0; i < leads; ++i) {
    const int64_t oa = lead_offset(a, b.lead, i), ob = lead_offset(bt, b.lead, i);
    const int64_t ola = lead_offset(la, b.lead, i), olb = lead_offset(lb, b.lead, i);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double x = read(la, ola + h * la.strides[r] + t * la.strides[r + 1]);
        const double y = read(lb, olb + h * lb.strides[r] + t * lb.strides[r + 1]);
        const MergeWeights<double> w = merge_weights(x, y, DoubleMath{});
        l[(i * H + h) * T + t] = w.lse;
        const int64_t ra = oa + t * a.strides[r] + h * a.strides[r + 1];
        const int64_t rb = ob + t * bt.strides[r] + h * bt.strides[r + 1];
        double* row = o + ((i * T + t) * H + h) * D;
        for (int64_t d = 0; d < D; ++d)
          row[d] = merge_value(w, read(a, ra + d * a.strides[r + 2]), read(bt, rb + d * bt.strides[r + 2]));
      }
  }
}

}  // namespace ejk::ops
