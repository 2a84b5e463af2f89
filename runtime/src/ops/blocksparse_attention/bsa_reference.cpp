// Float64 reference of block-sparse attention (bsa_reference.h). Deliberately plain: per
// (batch, head) every logit of every row, the row's max over logits and sinks, the softmax, and
// for the backward the textbook gradients of that softmax.
#include "ops/blocksparse_attention/bsa_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/elements.h"
#include "ops/blocksparse_attention/bsa_lists.h"

namespace ejk::ops {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One (batch, head): its rows in double and the probabilities of every pair.
struct Head {
  int64_t sq = 0, sk = 0, d = 0;
  std::vector<double> q, k, v;   // [sq, d], [sk, d], [sk, d]
  std::vector<double> s, prob;   // logits after the cap (-inf hidden) and probabilities, [sq, sk]
  std::vector<double> lse, out;  // [sq], [sq, d]
};

std::vector<double> rows(const void* base, DType dtype, int64_t offset, int64_t n, int64_t stride_s, int64_t d) {
  std::vector<double> r(size_t(n * d));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) r[size_t(i * d + c)] = engine::read_as_double(base, dtype, offset + i * stride_s + c);
  return r;
}

bool visible(const BlocksparseReferenceProblem& pr, int64_t b, int64_t h, int64_t i, int64_t j) {
  const FlashFwdParams& p = pr.p;
  if (!position_visible(i, j, p.mask)) return false;
  if (p.q_segment_ids &&
      !segment_visible(p.q_segment_ids[b * p.q_seg_stride_b + i], p.kv_segment_ids[b * p.kv_seg_stride_b + j]))
    return false;
  return layout_allows(pr.block_mask, b, h, i / pr.block_q, j / pr.block_k);
}

Head attend(const BlocksparseReferenceProblem& pr, int64_t b, int64_t h) {
  const FlashFwdParams& p = pr.p;
  Head hd;
  hd.sq = p.seqlen_q, hd.sk = p.seqlen_k, hd.d = p.head_dim;
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  hd.q = rows(p.q, pr.dtype, b * p.q_stride_b + h * p.q_stride_h, hd.sq, p.q_stride_s, hd.d);
  hd.k = rows(p.k, pr.dtype, b * p.k_stride_b + hk * p.k_stride_h, hd.sk, p.k_stride_s, hd.d);
  hd.v = rows(p.v, pr.dtype, b * p.v_stride_b + hk * p.v_stride_h, hd.sk, p.v_stride_s, hd.d);
  hd.s.assign(size_t(hd.sq * hd.sk), kNegInf);
  hd.prob.assign(size_t(hd.sq * hd.sk), 0.0);
  hd.lse.assign(size_t(hd.sq), kNegInf);
  hd.out.assign(size_t(hd.sq * hd.d), 0.0);
  const float* sinks = p.softmax_aux ? p.softmax_aux + h * p.sinks_stride_h : nullptr;
  for (int64_t i = 0; i < hd.sq; ++i) {
    double m = kNegInf;
    for (int64_t j = 0; j < hd.sk; ++j) {
      if (!visible(pr, b, h, i, j)) continue;
      double dot = 0;
      for (int64_t c = 0; c < hd.d; ++c) dot += hd.q[size_t(i * hd.d + c)] * hd.k[size_t(j * hd.d + c)];
      double x = double(p.scale) * dot;
      if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
      hd.s[size_t(i * hd.sk + j)] = x;
      m = std::max(m, x);
    }
    for (int64_t t = 0; sinks && t < p.num_sinks; ++t) m = std::max(m, double(sinks[t]));
    if (m == kNegInf) continue;  // nothing visible, no sink
    double l = 0;
    for (int64_t j = 0; j < hd.sk; ++j)
      if (hd.s[size_t(i * hd.sk + j)] != kNegInf) l += std::exp(hd.s[size_t(i * hd.sk + j)] - m);
    for (int64_t t = 0; sinks && t < p.num_sinks; ++t) l += std::exp(double(sinks[t]) - m);
    hd.lse[size_t(i)] = m + std::log(l);
    for (int64_t j = 0; j < hd.sk; ++j) {
      const double x = hd.s[size_t(i * hd.sk + j)];
      if (x == kNegInf) continue;
      const double w = std::exp(x - hd.lse[size_t(i)]);
      hd.prob[size_t(i * hd.sk + j)] = w;
      for (int64_t c = 0; c < hd.d; ++c) hd.out[size_t(i * hd.d + c)] += w * hd.v[size_t(j * hd.d + c)];
    }
  }
  return hd;
}

}  // namespace

void reference_blocksparse_fwd(const BlocksparseReferenceProblem& pr, double* out, double* lse) {
  const FlashFwdParams& p = pr.p;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const Head hd = attend(pr, b, h);
      const int64_t plane = b * p.heads_q + h;
      std::copy(hd.out.begin(), hd.out.end(), out + plane * p.seqlen_q * p.head_dim);
      std::copy(hd.lse.begin(), hd.lse.end(), lse + plane * p.seqlen_q);
    }
}

void reference_blocksparse_bwd(const BlocksparseReferenceProblem& pr, const BlocksparseReferenceGrads& g) {
  const FlashFwdParams& p = pr.p;
  const int64_t D = p.head_dim, sq = p.seqlen_q, sk = p.seqlen_k, group = p.heads_q / p.heads_kv;
  std::fill(g.dk, g.dk + p.batch * p.heads_kv * sk * D, 0.0);
  std::fill(g.dv, g.dv + p.batch * p.heads_kv * sk * D, 0.0);
  const bool shared_sinks = p.sinks_stride_h == 0;
  if (g.dsoftmax_aux) std::fill(g.dsoftmax_aux, g.dsoftmax_aux + (shared_sinks ? 1 : p.heads_q) * p.num_sinks, 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads_q; ++h) {
      const Head hd = attend(pr, b, h);
      const int64_t plane = b * p.heads_q + h, kv_plane = b * p.heads_kv + h / group;
      double* dq = g.dq + plane * sq * D;
      double* dk = g.dk + kv_plane * sk * D;
      double* dv = g.dv + kv_plane * sk * D;
      const float* sinks = p.softmax_aux ? p.softmax_aux + h * p.sinks_stride_h : nullptr;
      std::vector<double> dout(static_cast<size_t>(D));
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t c = 0; c < D; ++c)
          dout[size_t(c)] = engine::read_as_double(g.d_out, pr.dtype,
                                                   b * g.do_stride_b + h * g.do_stride_h + i * g.do_stride_s + c);
        for (int64_t c = 0; c < D; ++c) dq[i * D + c] = 0;
        if (hd.lse[size_t(i)] == kNegInf) continue;
        // D_i = d_out . out - d_lse: d lse / d s_ij = P_ij, and sinks carry no value.
        double delta = 0;
        for (int64_t c = 0; c < D; ++c) delta += dout[size_t(c)] * hd.out[size_t(i * D + c)];
        if (g.d_lse) delta -= double(g.d_lse[plane * sq + i]);
        for (int64_t j = 0; j < sk; ++j) {
          const double pr_ij = hd.prob[size_t(i * sk + j)];
          if (hd.s[size_t(i * sk + j)] == kNegInf) continue;
          double dp = 0;
          for (int64_t c = 0; c < D; ++c) dp += dout[size_t(c)] * hd.v[size_t(j * D + c)];
          double dx = pr_ij * (dp - delta);
          if (p.softcap > 0) {
            const double t = hd.s[size_t(i * sk + j)] / double(p.softcap);
            dx *= 1.0 - t * t;
          }
          for (int64_t c = 0; c < D; ++c) {
            dq[i * D + c] += double(p.scale) * dx * hd.k[size_t(j * D + c)];
            dk[j * D + c] += double(p.scale) * dx * hd.q[size_t(i * D + c)];
            dv[j * D + c] += pr_ij * dout[size_t(c)];
          }
        }
        if (g.dsoftmax_aux)
          for (int64_t t = 0; t < p.num_sinks; ++t)
            g.dsoftmax_aux[(shared_sinks ? 0 : h) * p.num_sinks + t] -=
                std::exp(double(sinks[t]) - hd.lse[size_t(i)]) * delta;
      }
    }
}

}  // namespace ejk::ops
