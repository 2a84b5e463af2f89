// Float64 reference of the flash attention forward (declared in flash_reference.h).
// Deliberately plain: per (sequence, head) it converts the rows it needs to double, then for
// every query computes all logits, their max, the denominator and the weighted sum of values.
#include "ops/flash_attention/flash_reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <algorithm>
#include <vector>

#include "ejk/core/error.h"
#include "ejk/kernels/common/attention_variant.h"
#include "engine/elements.h"

namespace ejk {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double read_elem(const void* base, int64_t index, DType dtype) { return engine::read_as_double(base, dtype, index); }

// Where sequence b lives: its first row in the (packed) tensors and its lengths.
struct SeqSpan {
  int64_t q_row0, k_row0;  // varlen: cu_seqlens[b]; dense: 0 (the batch stride applies)
  int64_t q_batch_offset, k_batch_offset, v_batch_offset;  // dense: b * stride_b
  int64_t sq, sk;
};

SeqSpan span_of(const FlashFwdParams& p, int64_t b) {
  SeqSpan s{};
  if (p.cu_seqlens_q) {
    s.q_row0 = p.cu_seqlens_q[b];
    s.k_row0 = p.cu_seqlens_k[b];
    s.sq = p.cu_seqlens_q[b + 1] - s.q_row0;
    s.sk = p.cu_seqlens_k[b + 1] - s.k_row0;
  } else {
    s.q_batch_offset = b * p.q_stride_b;
    s.k_batch_offset = b * p.k_stride_b;
    s.v_batch_offset = b * p.v_stride_b;
    s.sq = p.seqlen_q;
    s.sk = p.seqlen_k;
  }
  return s;
}

// rows x head_dim doubles of one head of q, k or v.
std::vector<double> gather_rows(const void* base, DType dtype, int64_t offset, int64_t row0,
                                int64_t rows, int64_t stride_s, int64_t head_dim) {
  std::vector<double> out(size_t(rows * head_dim));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < head_dim; ++d)
      out[size_t(r * head_dim + d)] = read_elem(base, offset + (row0 + r) * stride_s + d, dtype);
  return out;
}

void check_arguments(const FlashFwdParams& p, DType dtype, const double* out, const double* lse) {
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16)
    throw InvalidArgument("reference_flash_fwd: dtype " + std::string(dtype_name(dtype)) +
                          " is not supported (expected f32, bf16 or f16)");
  // Empty outputs (no query, no head) may come as null: nothing is written to them.
  const bool empty = p.batch == 0 || p.heads_q == 0 || p.seqlen_q == 0 || p.head_dim == 0;
  if ((!out || !lse) && !empty) throw InvalidArgument("reference_flash_fwd: out and lse must not be null");
  if (!p.q || !p.k || !p.v) throw InvalidArgument("reference_flash_fwd: q, k and v must be set");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    throw InvalidArgument("reference_flash_fwd: heads_q (" + std::to_string(p.heads_q) +
                          ") must be a positive multiple of heads_kv (" +
                          std::to_string(p.heads_kv) + ")");
  if (bool(p.cu_seqlens_q) != bool(p.cu_seqlens_k))
    throw InvalidArgument("reference_flash_fwd: cu_seqlens_q and cu_seqlens_k must be set together");
  if (bool(p.q_segment_ids) != bool(p.kv_segment_ids))
    throw InvalidArgument("reference_flash_fwd: q_segment_ids and kv_segment_ids must be set together");
  if (p.softmax_aux && p.num_sinks <= 0)
    throw InvalidArgument("reference_flash_fwd: softmax_aux is set, so num_sinks must be > 0");
}

// Everything one (sequence, head) needs to attend its queries.
struct HeadProblem {
  const FlashFwdParams* p;
  const DropoutParams* dropout;  // null: none
  DType dtype;
  int64_t b, h;
  SeqSpan span;
  std::vector<double> q, k, v;  // [sq, D], [sk, D], [sk, D]
};

// Logit of query row s (0-based in the sequence) and key kk, a key visible by position
// (attend_row's span), or -inf when its segment or the dense mask hides it.
double logit(const HeadProblem& hp, int64_t s, int64_t kk) {
  const FlashFwdParams& p = *hp.p;
  if (p.q_segment_ids &&
      !segment_visible(p.q_segment_ids[hp.b * p.q_seg_stride_b + s],
                       p.kv_segment_ids[hp.b * p.kv_seg_stride_b + kk]))
    return kNegInf;
  if (p.dense_mask && !dense_mask_visible(flash_mask_row(p, hp.b, hp.h, s), kk)) return kNegInf;
  const int64_t D = p.head_dim;
  double dot = 0;
  for (int64_t d = 0; d < D; ++d) dot += hp.q[size_t(s * D + d)] * hp.k[size_t(kk * D + d)];
  // Same order as mask.h's transform_logit: scale, bias, softcap.
  double x = double(p.scale) * dot;
  if (p.bias)
    x += read_elem(p.bias, hp.b * p.bias_stride_b + hp.h * p.bias_stride_h + s * p.bias_stride_q + kk,
                   hp.dtype);
  if (p.softcap > 0) x = double(p.softcap) * std::tanh(x / double(p.softcap));
  return x;
}

// Two-pass softmax of one query row; writes D outputs and returns the lse.
double attend_row(const HeadProblem& hp, int64_t s, std::vector<double>& logits, double* out_row) {
  const FlashFwdParams& p = *hp.p;
  const int64_t D = p.head_dim, sk = hp.span.sk;
  // The keys the row sees by position: the kernels' tile classifier on a one-row block, which is
  // exact for one row (attention_variant.h). The variant is the call's: p.mask as the runtime set it.
  const PositionSpan keys =
      block_visible_keys(variant_mask(p.mask.causal, true, p.mask), s, s, sk);
  double m = kNegInf;
  for (int64_t kk = 0; kk < sk; ++kk) {
    logits[size_t(kk)] = kk >= keys.first && kk <= keys.last ? logit(hp, s, kk) : kNegInf;
    m = std::max(m, logits[size_t(kk)]);
  }
  const float* sinks = p.softmax_aux ? p.softmax_aux + hp.h * p.sinks_stride_h : nullptr;
  for (int64_t i = 0; sinks && i < p.num_sinks; ++i) m = std::max(m, double(sinks[i]));
  for (int64_t d = 0; d < D; ++d) out_row[d] = 0;
  if (m == kNegInf) return kNegInf;  // nothing visible, no sink: out 0, lse -inf

  double l = 0;
  for (int64_t kk = 0; kk < sk; ++kk) {
    if (logits[size_t(kk)] == kNegInf) continue;
    const double w = std::exp(logits[size_t(kk)] - m);
    l += w;  // the denominator does not see dropout
    const double z = hp.dropout ? double(dropout_factor(*hp.dropout, hp.b, hp.h, s, kk)) : 1.0;
    for (int64_t d = 0; d < D; ++d) out_row[d] += w * z * hp.v[size_t(kk * D + d)];
  }
  for (int64_t i = 0; sinks && i < p.num_sinks; ++i) l += std::exp(double(sinks[i]) - m);
  if (p.normalize_output)
    for (int64_t d = 0; d < D; ++d) out_row[d] /= l;
  return m + std::log(l);
}

}  // namespace

void reference_flash_fwd(const FlashFwdParams& p, DType dtype, double* out, double* lse,
                         const DropoutParams* dropout) {
  check_arguments(p, dtype, out, lse);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t D = p.head_dim, Hq = p.heads_q;
  const int64_t group = p.heads_q / p.heads_kv;
  const int64_t total_q = varlen ? p.cu_seqlens_q[p.batch] : p.batch * p.seqlen_q;
  std::vector<double> logits;

  for (int64_t b = 0; b < p.batch; ++b) {
    HeadProblem hp{&p, dropout, dtype, b, 0, span_of(p, b), {}, {}, {}};
    const SeqSpan& sp = hp.span;
    logits.resize(size_t(sp.sk));
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      hp.h = h;
      hp.q = gather_rows(p.q, dtype, sp.q_batch_offset + h * p.q_stride_h, sp.q_row0, sp.sq,
                         p.q_stride_s, D);
      hp.k = gather_rows(p.k, dtype, sp.k_batch_offset + hk * p.k_stride_h, sp.k_row0, sp.sk,
                         p.k_stride_s, D);
      hp.v = gather_rows(p.v, dtype, sp.v_batch_offset + hk * p.v_stride_h, sp.k_row0, sp.sk,
                         p.v_stride_s, D);
      for (int64_t s = 0; s < sp.sq; ++s) {
        const int64_t row = varlen ? sp.q_row0 + s : b * p.seqlen_q + s;  // row of [*, Hq, D]
        const int64_t lse_index = varlen ? h * total_q + row : (b * Hq + h) * p.seqlen_q + s;
        lse[lse_index] = attend_row(hp, s, logits, out + (row * Hq + h) * D);
      }
    }
  }
}

}  // namespace ejk
