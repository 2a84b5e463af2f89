#include "ops/grouped_matmul/grouped_matmul_reference.h"

#include <vector>

#include "engine/elements.h"

namespace ejk {
namespace {

double at(const void* base, DType dtype, int64_t index) { return engine::read_as_double(base, dtype, index); }

}  // namespace

void reference_grouped_matmul(const GroupedMatmulParams& p, DType dtype, DType existing_dtype, DType d_out_dtype,
                              const GmmRefOut& r) {
  auto rhs = [&](int64_t g, int64_t kk, int64_t nn) { return at(p.rhs, dtype, g * p.rhs_g + kk * p.rhs_k + nn * p.rhs_n); };
  auto lhs = [&](int64_t row, int64_t kk) { return at(p.lhs, dtype, row * p.lhs_stride + kk); };
  auto d_out = [&](int64_t row, int64_t nn) { return at(p.d_out, d_out_dtype, row * p.d_out_stride + nn); };
  // The group of each row (-1: none), from the shared definition of a group's rows.
  std::vector<int64_t> group(size_t(p.m), -1);
  for (int64_t g = 0; g < p.groups; ++g) {
    const TokenSpan s = gmm_group_rows(p, g);
    for (int64_t row = s.begin; row < s.end; ++row) group[size_t(row)] = g;
  }
  if (r.out)
    for (int64_t row = 0; row < p.m; ++row)
      for (int64_t nn = 0; nn < p.n; ++nn) {
        double sum = 0;
        if (const int64_t g = group[size_t(row)]; g >= 0)
          for (int64_t kk = 0; kk < p.k; ++kk) sum += lhs(row, kk) * rhs(g, kk, nn);
        if (p.existing_out) sum += at(p.existing_out, existing_dtype, row * p.existing_stride + nn);
        r.out[row * p.n + nn] = sum;
      }
  if (r.dlhs)
    for (int64_t row = 0; row < p.m; ++row)
      for (int64_t kk = 0; kk < p.k; ++kk) {
        double sum = 0;
        if (const int64_t g = group[size_t(row)]; g >= 0)
          for (int64_t nn = 0; nn < p.n; ++nn) sum += d_out(row, nn) * rhs(g, kk, nn);
        r.dlhs[row * p.k + kk] = sum;
      }
  if (r.drhs)
    for (int64_t g = 0; g < p.groups; ++g) {
      const TokenSpan s = gmm_group_rows(p, g);
      for (int64_t kk = 0; kk < p.k; ++kk)
        for (int64_t nn = 0; nn < p.n; ++nn) {
          double sum = 0;
          for (int64_t row = s.begin; row < s.end; ++row) sum += lhs(row, kk) * d_out(row, nn);
          r.drhs[r.drhs_transposed ? (g * p.n + nn) * p.k + kk : (g * p.k + kk) * p.n + nn] = sum;
        }
    }
}

}  // namespace ejk
