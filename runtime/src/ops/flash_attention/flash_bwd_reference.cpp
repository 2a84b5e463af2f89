// Float64 reference of the flash attention backward (declared in flash_bwd_reference.h).
// Plain: per (sequence, q head) every query row's logits, probabilities and their gradients,
// in the math of common/flash_bwd_params.h, with visibility from mask.h's functions.
#include "ops/flash_attention/flash_bwd_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/common/attention_variant.h"
#include "engine/elements.h"

namespace ejk {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Rows {  // one head's rows of a [*, S, H, D] tensor, as doubles
  std::vector<double> x;
  const double* row(int64_t r, int64_t d) const { return x.data() + r * d; }
};

Rows gather(const void* base, DType dtype, int64_t offset, int64_t row0, int64_t rows, int64_t stride_s, int64_t D) {
  Rows r{std::vector<double>(size_t(rows * D))};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t d = 0; d < D; ++d)
      r.x[size_t(i * D + d)] = engine::read_as_double(base, dtype, offset + (row0 + i) * stride_s + d);
  return r;
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void reference_flash_bwd(const FlashBwdParams& bp, DType dtype, const FlashBwdReferenceOut& out,
                         const DropoutParams* dropout) {
  const FlashFwdParams& p = bp.fwd;
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw InvalidArgument("reference_flash_bwd: dtype " + std::string(dtype_name(dtype)) + " is not supported");
  if (!p.normalize_output) throw InvalidArgument("reference_flash_bwd: normalize_output must be true");
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t D = p.head_dim, Hq = p.heads_q, Hkv = p.heads_kv, group = Hq / Hkv;
  const int64_t total_q = varlen ? p.cu_seqlens_q[p.batch] : p.batch * p.seqlen_q;
  const int64_t total_k = varlen ? p.cu_seqlens_k[p.batch] : p.batch * p.seqlen_k;
  std::fill_n(out.dq, total_q * Hq * D, 0.0);
  std::fill_n(out.dk, total_k * Hkv * D, 0.0);
  std::fill_n(out.dv, total_k * Hkv * D, 0.0);
  const FlashFwdBiasExtent be = flash_fwd_bias_extent(p);
  const bool want_dbias = out.dbias && p.bias;
  if (want_dbias) std::fill_n(out.dbias, be.batches * be.heads * p.seqlen_q * p.seqlen_k, 0.0);
  const bool want_dsinks = out.dsoftmax_aux && p.softmax_aux;
  if (want_dsinks) std::fill_n(out.dsoftmax_aux, (p.sinks_stride_h ? Hq : 1) * p.num_sinks, 0.0);
  const MaskSpec mask = variant_mask(p.mask.causal, true, p.mask);
  std::vector<double> s_row, p_row, z_row;

  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t q0 = varlen ? p.cu_seqlens_q[b] : 0, k0 = varlen ? p.cu_seqlens_k[b] : 0;
    const int64_t sq = varlen ? p.cu_seqlens_q[b + 1] - q0 : p.seqlen_q;
    const int64_t sk = varlen ? p.cu_seqlens_k[b + 1] - k0 : p.seqlen_k;
    const int64_t qb = varlen ? 0 : b * p.q_stride_b, kb = varlen ? 0 : b * p.k_stride_b;
    const int64_t vb = varlen ? 0 : b * p.v_stride_b, dob = varlen ? 0 : b * bp.do_stride_b;
    s_row.resize(size_t(sk)), p_row.resize(size_t(sk)), z_row.resize(size_t(sk));
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      const Rows q = gather(p.q, dtype, qb + h * p.q_stride_h, q0, sq, p.q_stride_s, D);
      const Rows k = gather(p.k, dtype, kb + hk * p.k_stride_h, k0, sk, p.k_stride_s, D);
      const Rows v = gather(p.v, dtype, vb + hk * p.v_stride_h, k0, sk, p.v_stride_s, D);
      const Rows dO = gather(bp.d_out, dtype, dob + h * bp.do_stride_h, q0, sq, bp.do_stride_s, D);
      const float* sinks = p.softmax_aux ? p.softmax_aux + h * p.sinks_stride_h : nullptr;
      for (int64_t i = 0; i < sq; ++i) {
        const PositionSpan keys = block_visible_keys(mask, i, i, sk);
        double m = kNegInf;
        for (int64_t j = 0; j < sk; ++j) {
          double x = kNegInf;
          const bool seg_ok = !p.q_segment_ids || segment_visible(p.q_segment_ids[b * p.q_seg_stride_b + i],
                                                                 p.kv_segment_ids[b * p.kv_seg_stride_b + j]);
          const bool dense_ok = !p.dense_mask || dense_mask_visible(flash_mask_row(p, b, h, i), j);
          if (j >= keys.first && j <= keys.last && seg_ok && dense_ok) {
            x = double(p.scale) * dot(q.row(i, D), k.row(j, D), D);
            if (p.bias)
              x += engine::read_as_double(p.bias, dtype,
                                          b * p.bias_stride_b + h * p.bias_stride_h + i * p.bias_stride_q + j);
            if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
          }
          s_row[size_t(j)] = x;
          m = std::max(m, x);
        }
        for (int64_t t = 0; sinks && t < p.num_sinks; ++t) m = std::max(m, double(sinks[t]));
        if (m == kNegInf) continue;  // nothing visible, no sink: out is 0 whatever the inputs
        double l = 0;
        for (int64_t j = 0; j < sk; ++j) l += s_row[size_t(j)] == kNegInf ? 0 : std::exp(s_row[size_t(j)] - m);
        for (int64_t t = 0; sinks && t < p.num_sinks; ++t) l += std::exp(double(sinks[t]) - m);
        const double lse = m + std::log(l);
        // D_i = sum_j P_ij Z_ij dP_ij - dlse_i (= d_out . out - dlse_i; Z the dropout factor, else 1)
        double delta = 0;
        for (int64_t j = 0; j < sk; ++j) {
          p_row[size_t(j)] = s_row[size_t(j)] == kNegInf ? 0 : std::exp(s_row[size_t(j)] - lse);
          z_row[size_t(j)] = dropout ? double(dropout_factor(*dropout, b, h, i, j)) : 1.0;
          if (p_row[size_t(j)] != 0) delta += p_row[size_t(j)] * z_row[size_t(j)] * dot(dO.row(i, D), v.row(j, D), D);
        }
        const int64_t qrow = varlen ? q0 + i : b * p.seqlen_q + i;
        if (bp.d_lse) delta -= double(bp.d_lse[varlen ? h * total_q + qrow : (b * Hq + h) * p.seqlen_q + i]);
        double* dq = out.dq + (qrow * Hq + h) * D;
        for (int64_t j = 0; j < sk; ++j) {
          const double pij = p_row[size_t(j)];
          if (pij == 0 && s_row[size_t(j)] == kNegInf) continue;
          const int64_t krow = varlen ? k0 + j : b * p.seqlen_k + j;
          double* dk = out.dk + (krow * Hkv + hk) * D;
          double* dv = out.dv + (krow * Hkv + hk) * D;
          const double zij = z_row[size_t(j)];
          double dx = pij * (zij * dot(dO.row(i, D), v.row(j, D), D) - delta);
          if (p.softcap > 0) {
            const double t = s_row[size_t(j)] / double(p.softcap);
            dx *= 1 - t * t;
          }
          for (int64_t d = 0; d < D; ++d) {
            dv[d] += pij * zij * dO.row(i, D)[d];
            dq[d] += double(p.scale) * dx * k.row(j, D)[d];
            dk[d] += double(p.scale) * dx * q.row(i, D)[d];
          }
          if (want_dbias) {
            const int64_t pb = be.batches == 1 ? 0 : b, ph = be.heads == 1 ? 0 : h;
            out.dbias[((pb * be.heads + ph) * p.seqlen_q + i) * p.seqlen_k + j] += dx;
          }
        }
        if (want_dsinks)
          for (int64_t t = 0; t < p.num_sinks; ++t)
            out.dsoftmax_aux[(p.sinks_stride_h ? h : 0) * p.num_sinks + t] -= std::exp(double(sinks[t]) - lse) * delta;
      }
    }
  }
}

}  // namespace ejk
