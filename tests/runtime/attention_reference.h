// Random attention problems in float32 and their float64 reference, evaluated with mask.h's
// own visibility function so the semantics exist once. Shared by the CPU JIT tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "ejk/kernels/common/flash_params.h"

namespace ejk::test {

struct Problem {
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, dim;
  std::vector<float> q, k, v, out, lse;
};

inline Problem random_problem(std::mt19937_64& rng, int64_t dim) {
  Problem pr{2, 37 + int64_t(rng() % 40), 45 + int64_t(rng() % 40), 4, 2, dim, {}, {}, {}, {}, {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& t, int64_t n) {
    t.resize(n);
    for (auto& x : t) x = normal(rng);
  };
  fill(pr.q, pr.batch * pr.seq_q * pr.heads_q * dim);
  fill(pr.k, pr.batch * pr.seq_k * pr.heads_kv * dim);
  fill(pr.v, pr.batch * pr.seq_k * pr.heads_kv * dim);
  // NaN-filled outputs: a row the kernel forgets to write fails the comparison.
  pr.out.assign(pr.q.size(), std::numeric_limits<float>::quiet_NaN());
  pr.lse.assign(pr.batch * pr.heads_q * pr.seq_q, std::numeric_limits<float>::quiet_NaN());
  return pr;
}

inline ejk::FlashFwdParams params_for(Problem& pr, bool causal) {
  ejk::FlashFwdParams p{};
  p.q = pr.q.data(), p.k = pr.k.data(), p.v = pr.v.data(), p.out = pr.out.data();
  p.lse = pr.lse.data();
  p.batch = pr.batch, p.seqlen_q = pr.seq_q, p.seqlen_k = pr.seq_k;
  p.heads_q = pr.heads_q, p.heads_kv = pr.heads_kv, p.head_dim = pr.dim;
  int64_t D = pr.dim;
  p.q_stride_h = D, p.q_stride_s = pr.heads_q * D, p.q_stride_b = pr.seq_q * pr.heads_q * D;
  p.k_stride_h = D, p.k_stride_s = pr.heads_kv * D, p.k_stride_b = pr.seq_k * pr.heads_kv * D;
  p.v_stride_h = p.k_stride_h, p.v_stride_s = p.k_stride_s, p.v_stride_b = p.k_stride_b;
  p.o_stride_h = p.q_stride_h, p.o_stride_s = p.q_stride_s, p.o_stride_b = p.q_stride_b;
  p.lse_stride_h = pr.seq_q, p.lse_stride_b = pr.heads_q * pr.seq_q;
  p.scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  p.mask.causal = causal;
  p.normalize_output = 1;
  return p;
}

// Relative L2 error of out and lse against a float64 evaluation of mask.h's definition.
// NaN anywhere makes the error NaN, which never passes a <= comparison.
inline std::pair<double, double> reference_errors(const Problem& pr, const ejk::FlashFwdParams& p) {
  double out_err = 0, out_ref = 0, lse_err = 0, lse_ref = 0;
  int64_t D = pr.dim, group = pr.heads_q / pr.heads_kv;
  std::vector<double> s(pr.seq_k);
  for (int64_t b = 0; b < pr.batch; ++b)
    for (int64_t h = 0; h < pr.heads_q; ++h)
      for (int64_t i = 0; i < pr.seq_q; ++i) {
        const float* q = &pr.q[b * p.q_stride_b + i * p.q_stride_s + h * p.q_stride_h];
        double m = -INFINITY;
        for (int64_t j = 0; j < pr.seq_k; ++j) {
          const float* k = &pr.k[b * p.k_stride_b + j * p.k_stride_s + (h / group) * p.k_stride_h];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * k[d];
          s[j] = ejk::position_visible(i, j, p.mask) ? dot * p.scale : -INFINITY;
          m = std::max(m, s[j]);
        }
        double l = 0;
        std::vector<double> o(D, 0.0);
        for (int64_t j = 0; j < pr.seq_k && m > -INFINITY; ++j) {
          double w = std::exp(s[j] - m);
          l += w;
          const float* v = &pr.v[b * p.v_stride_b + j * p.v_stride_s + (h / group) * p.v_stride_h];
          for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
        }
        const float* got = &pr.out[b * p.o_stride_b + i * p.o_stride_s + h * p.o_stride_h];
        for (int64_t d = 0; d < D; ++d) {
          double want = l > 0 ? o[d] / l : 0.0;
          out_err += (got[d] - want) * (got[d] - want);
          out_ref += want * want;
        }
        double want_lse = l > 0 ? m + std::log(l) : -INFINITY;
        double got_lse = pr.lse[b * p.lse_stride_b + h * p.lse_stride_h + i];
        double diff = (got_lse == want_lse) ? 0.0 : got_lse - want_lse;  // -inf == -inf
        lse_err += diff * diff;
        lse_ref += std::isfinite(want_lse) ? want_lse * want_lse : 0.0;
      }
  return {std::sqrt(out_err / out_ref), std::sqrt(lse_err / lse_ref)};
}

}  // namespace ejk::test
