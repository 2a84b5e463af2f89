#include "flash_problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ejk/core/error.h"
#include "ejk/half.h"
#include "ejk/kernels/common/mask.h"

namespace ejk::test {
namespace {

// Rounds float32 values to `dtype` and returns the typed tensor; `values` is updated to hold
// exactly the typed values.
Tensor to_typed(Tensor& values, DType dtype) {
  if (dtype == DType::f32) return values;
  Tensor t = Tensor::empty(values.shape(), dtype);
  float* v = values.data_as<float>();
  auto* h = t.data_as<uint16_t>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    h[i] = dtype == DType::bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]);
    v[i] = dtype == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
  }
  return t;
}

Tensor random_normal(Dims shape, std::mt19937_64& rng, float stddev = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::f32);
  std::normal_distribution<float> nd(0.0f, stddev);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return t;
}

// Random cut points: n non-negative lengths summing to total (each >= 1 when total >= n).
std::vector<int32_t> random_cum(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int32_t> cuts;
  int64_t slack = total >= n ? total - n : total;
  std::uniform_int_distribution<int64_t> u(0, slack);
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(static_cast<int32_t>(u(rng)));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cum{0};
  int64_t base = total >= n ? 1 : 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t hi = i + 1 < n ? cuts[i] : slack;
    int64_t lo = i == 0 ? 0 : cuts[i - 1];
    cum.push_back(static_cast<int32_t>(cum.back() + (hi - lo) + base));
  }
  return cum;
}

Tensor i32_tensor(const std::vector<int32_t>& v, Dims shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

// Segment ids in runs: ids 0..n-1 over the sequence, and a padded tail (-1) for q sometimes.
std::vector<int32_t> random_segments(int64_t b, int64_t len, int64_t nseg, bool pad_tail, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < b; ++i) {
    auto cum = random_cum(nseg, len, rng);
    for (int64_t s = 0; s < nseg; ++s)
      for (int32_t j = cum[s]; j < cum[s + 1]; ++j) ids.push_back(static_cast<int32_t>(s));
    if (pad_tail && len > 2) {
      int64_t pad = std::uniform_int_distribution<int64_t>(0, len / 4)(rng);
      for (int64_t j = len - pad; j < len; ++j) ids[i * len + j] = -1;
    }
  }
  return ids;
}

}  // namespace

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  const auto* h = t.data_as<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data_as<float>()[i] = t.dtype() == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
  return out;
}

FlashCase make_random_case(const FlashCaseSpec& s) {
  FlashCase c;
  c.spec = s;
  std::mt19937_64 rng(s.seed);
  const Dims qshape = s.varlen ? Dims{s.sq, s.hq, s.d} : Dims{s.b, s.sq, s.hq, s.d};
  const Dims kshape = s.varlen ? Dims{s.sk, s.hkv, s.d} : Dims{s.b, s.sk, s.hkv, s.d};
  c.q_values = random_normal(qshape, rng);
  c.k_values = random_normal(kshape, rng);
  c.v_values = random_normal(kshape, rng);
  c.q = to_typed(c.q_values, s.dtype);
  c.k = to_typed(c.k_values, s.dtype);
  c.v = to_typed(c.v_values, s.dtype);
  if (s.bias) {
    c.bias_values = random_normal({s.b, s.hq, s.sq, s.sk}, rng);
    c.bias = to_typed(c.bias_values, s.dtype);
  }
  if (s.sinks) c.softmax_aux = s.shared_sinks ? random_normal({1}, rng) : random_normal({s.hq, 1}, rng);
  if (s.segments) {
    int64_t nseg = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    c.q_segment_ids = i32_tensor(random_segments(s.b, s.sq, nseg, true, rng), {s.b, s.sq});
    c.kv_segment_ids = i32_tensor(random_segments(s.b, s.sk, nseg, false, rng), {s.b, s.sk});
  }
  if (s.varlen) {
    c.cum_seqlens_q = i32_tensor(random_cum(s.b, s.sq, rng), {s.b + 1});
    c.cum_seqlens_k = i32_tensor(random_cum(s.b, s.sk, rng), {s.b + 1});
  }
  return c;
}

FlashAttentionInputs FlashCase::inputs() const {
  FlashAttentionInputs in;
  in.q = q.view();
  in.k = k.view();
  in.v = v.view();
  if (bias) in.bias = bias.view();
  if (q_segment_ids) in.q_segment_ids = q_segment_ids.view();
  if (kv_segment_ids) in.kv_segment_ids = kv_segment_ids.view();
  if (cum_seqlens_q) in.cum_seqlens_q = cum_seqlens_q.view();
  if (cum_seqlens_k) in.cum_seqlens_k = cum_seqlens_k.view();
  if (softmax_aux) in.softmax_aux = softmax_aux.view();
  return in;
}

FlashAttentionInputs FlashCase::inputs_on(Device device, std::vector<Tensor>& keep) const {
  FlashAttentionInputs in = inputs();
  if (device.kind == DeviceKind::cpu) return in;
  auto move = [&](TensorView& v, const Tensor& t) {
    keep.push_back(t.to(device));
    v = keep.back().view();
  };
  if (softmax_aux) move(*in.softmax_aux, softmax_aux);
  move(in.q, q);
  move(in.k, k);
  move(in.v, v);
  if (bias) move(*in.bias, bias);
  if (q_segment_ids) move(*in.q_segment_ids, q_segment_ids);
  if (kv_segment_ids) move(*in.kv_segment_ids, kv_segment_ids);
  if (cum_seqlens_q) move(*in.cum_seqlens_q, cum_seqlens_q);
  if (cum_seqlens_k) move(*in.cum_seqlens_k, cum_seqlens_k);
  return in;
}

FlashAttentionOptions FlashCase::options(int64_t block_q, int64_t block_k) const {
  FlashAttentionOptions o;
  o.softmax_scale = spec.scale;
  o.causal = spec.causal;
  o.sliding_window = spec.window;
  o.logits_soft_cap = spec.softcap;
  o.normalize_output = spec.normalize_output;
  o.block_q = block_q;
  o.block_k = block_k;
  // Varlen: the longest sequences, as a framework passes them for device tensors.
  auto longest = [](const Tensor& cum) {
    int64_t m = 0;
    for (int64_t i = 1; i < cum.numel(); ++i) m = std::max<int64_t>(m, cum.data_as<int32_t>()[i] - cum.data_as<int32_t>()[i - 1]);
    return m;
  };
  if (cum_seqlens_q) o.max_seqlen_q = longest(cum_seqlens_q), o.max_seqlen_k = longest(cum_seqlens_k);
  return o;
}

double FlashCase::visible_pairs() const {
  MaskSpec m;
  m.causal = spec.causal;
  if (spec.window) {
    m.window_left = spec.window->left;
    m.window_right = spec.window->right;
  }
  auto pairs = [&](int64_t sq, int64_t sk) {
    double n = 0;
    for (int64_t i = 0; i < sq; ++i) {
      int64_t lo = std::max<int64_t>(0, first_visible_key(i, m));
      int64_t hi = std::min<int64_t>(sk - 1, last_visible_key(i, m));
      if (hi >= lo) n += static_cast<double>(hi - lo + 1);
    }
    return n;
  };
  if (!cum_seqlens_q) return spec.b * pairs(spec.sq, spec.sk);
  double n = 0;
  const auto* cq = cum_seqlens_q.data_as<int32_t>();
  const auto* ck = cum_seqlens_k.data_as<int32_t>();
  for (int64_t i = 0; i + 1 < cum_seqlens_q.numel(); ++i) n += pairs(cq[i + 1] - cq[i], ck[i + 1] - ck[i]);
  return n;
}

}  // namespace ejk::test
