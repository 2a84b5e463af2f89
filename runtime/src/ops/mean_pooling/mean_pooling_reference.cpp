#include "ops/mean_pooling/mean_pooling_reference.h"

#include <string>

#include "ejk/core/error.h"
#include "engine/elements.h"

namespace ejk {
namespace {

double read_elem(const void* base, int64_t index, DType dtype) { return engine::read_as_double(base, dtype, index); }

}  // namespace

void reference_mean_pool(const MeanPoolParams& p, bool backward, DType dtype, double* out) {
  for (int64_t s = 0; s < p.sequences; ++s) {
    const MeanPoolSpan sp = mean_pool_span(p, s);
    const double scale = mean_pool_scale<double>(sp.end - sp.begin);
    for (int64_t d = 0; d < p.dim; ++d) {
      if (backward) {
        const double g = read_elem(p.rows, s * p.row_stride + d, dtype) * scale;
        for (int64_t i = sp.begin; i < sp.end; ++i) out[i * p.dim + d] = g;
        continue;
      }
      double sum = 0;
      for (int64_t i = sp.begin; i < sp.end; ++i) sum += read_elem(p.tokens, mean_pool_token(p, s, i) + d, dtype);
      out[s * p.dim + d] = sum * scale;
    }
  }
}

}  // namespace ejk
