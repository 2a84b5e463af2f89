// Float64 reference of NSA's selection attention (nsa_reference.h). Deliberately plain: the
// visibility of every (token, key) pair from the slots, the row's softmax, and for the backward
// the textbook gradients of that softmax.
#include "ops/nsa_selection_attention/nsa_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/elements.h"

namespace ejk::ops {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Key j is visible from token t of kv head hk: j <= t and a counted slot names j's block.
bool visible(const NsaParams& p, int64_t b, int64_t t, int64_t hk, int64_t j) {
  if (j > t) return false;
  int64_t count = p.slots;
  if (p.block_counts)
    count = std::clamp<int64_t>(p.block_counts[b * p.bc_stride_b + t * p.bc_stride_t + hk * p.bc_stride_h], 0, p.slots);
  for (int64_t s = 0; s < count; ++s)
    if (p.block_indices[b * p.bi_stride_b + t * p.bi_stride_t + hk * p.bi_stride_h + s * p.bi_stride_s] ==
        j / p.block_size)
      return true;
  return false;
}

std::vector<double> row(const void* base, DType dtype, int64_t at, int64_t d) {
  std::vector<double> r(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c) r[size_t(c)] = engine::read_as_double(base, dtype, at + c);
  return r;
}

// One (sequence, token, head): the probabilities over all T keys (0 where hidden), out, lse.
struct Row {
  std::vector<double> prob, out;
  double lse = kNegInf;
};

Row attend(const NsaParams& p, int64_t b, int64_t t, int64_t h, const std::vector<double>& q,
           const std::vector<std::vector<double>>& keys, const std::vector<std::vector<double>>& values) {
  const int64_t hk = h / (p.heads_q / p.heads_kv), T = p.seqlen, D = p.head_dim;
  Row r;
  r.prob.assign(size_t(T), 0.0);
  r.out.assign(size_t(D), 0.0);
  std::vector<double> s(size_t(T), kNegInf);
  double m = kNegInf;
  for (int64_t j = 0; j < T; ++j) {
    if (!visible(p, b, t, hk, j)) continue;
    double dot = 0;
    for (int64_t c = 0; c < D; ++c) dot += q[size_t(c)] * keys[size_t(j)][size_t(c)];
    s[size_t(j)] = double(p.scale) * dot;
    m = std::max(m, s[size_t(j)]);
  }
  if (m == kNegInf) return r;
  double l = 0;
  for (int64_t j = 0; j < T; ++j)
    if (s[size_t(j)] != kNegInf) l += std::exp(s[size_t(j)] - m);
  r.lse = m + std::log(l);
  for (int64_t j = 0; j < T; ++j) {
    if (s[size_t(j)] == kNegInf) continue;
    r.prob[size_t(j)] = std::exp(s[size_t(j)] - r.lse);
    for (int64_t c = 0; c < D; ++c) r.out[size_t(c)] += r.prob[size_t(j)] * values[size_t(j)][size_t(c)];
  }
  return r;
}

// K and V of (b, hk) as rows of doubles.
void kv_rows(const NsaParams& p, DType dtype, int64_t b, int64_t hk, std::vector<std::vector<double>>& keys,
             std::vector<std::vector<double>>& values) {
  keys.resize(size_t(p.seqlen)), values.resize(size_t(p.seqlen));
  for (int64_t j = 0; j < p.seqlen; ++j) {
    keys[size_t(j)] = row(p.k, dtype, b * p.k_stride_b + j * p.k_stride_t + hk * p.k_stride_h, p.head_dim);
    values[size_t(j)] = row(p.v, dtype, b * p.v_stride_b + j * p.v_stride_t + hk * p.v_stride_h, p.head_dim);
  }
}

}  // namespace

void reference_nsa_fwd(const NsaParams& p, DType dtype, double* out, double* lse) {
  const int64_t T = p.seqlen, D = p.head_dim, group = p.heads_q / p.heads_kv;
  std::vector<std::vector<double>> keys, values;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      kv_rows(p, dtype, b, hk, keys, values);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const auto q = row(p.q, dtype, b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h, D);
          const Row r = attend(p, b, t, h, q, keys, values);
          const int64_t at = (b * T + t) * p.heads_q + h;
          std::copy(r.out.begin(), r.out.end(), out + at * D);
          lse[at] = r.lse;
        }
    }
}

void reference_nsa_bwd(const NsaParams& p, DType dtype, double* dq, double* dk, double* dv) {
  const int64_t T = p.seqlen, D = p.head_dim, group = p.heads_q / p.heads_kv;
  std::fill(dk, dk + p.batch * T * p.heads_kv * D, 0.0);
  std::fill(dv, dv + p.batch * T * p.heads_kv * D, 0.0);
  std::vector<std::vector<double>> keys, values;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
      kv_rows(p, dtype, b, hk, keys, values);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const auto q = row(p.q, dtype, b * p.q_stride_b + t * p.q_stride_t + h * p.q_stride_h, D);
          const auto g = row(p.d_out, dtype, b * p.do_stride_b + t * p.do_stride_t + h * p.do_stride_h, D);
          const Row r = attend(p, b, t, h, q, keys, values);
          double* dq_row = dq + ((b * T + t) * p.heads_q + h) * D;
          std::fill(dq_row, dq_row + D, 0.0);
          if (r.lse == kNegInf) continue;
          // d s_j = P_j (d_out . v_j - d_out . out + d_lse), s_j = scale q . k_j.
          double delta = 0;
          for (int64_t c = 0; c < D; ++c) delta += g[size_t(c)] * r.out[size_t(c)];
          if (p.d_lse) delta -= double(p.d_lse[b * p.dl_stride_b + t * p.dl_stride_t + h * p.dl_stride_h]);
          for (int64_t j = 0; j < T; ++j) {
            const double pj = r.prob[size_t(j)];
            if (pj == 0 && !visible(p, b, t, hk, j)) continue;
            double dp = 0;
            for (int64_t c = 0; c < D; ++c) dp += g[size_t(c)] * values[size_t(j)][size_t(c)];
            const double ds = pj * (dp - delta) * double(p.scale);
            double* dk_row = dk + ((b * T + j) * p.heads_kv + hk) * D;
            double* dv_row = dv + ((b * T + j) * p.heads_kv + hk) * D;
            for (int64_t c = 0; c < D; ++c) {
              dq_row[c] += ds * keys[size_t(j)][size_t(c)];
              dk_row[c] += ds * q[size_t(c)];
              dv_row[c] += pj * g[size_t(c)];
            }
          }
        }
    }
}

}  // namespace ejk::ops
