// A flash attention backward problem for the op tests: random inputs, the forward run on the
// same backend for out and lse (as training does), a random d_out, and the gradient outputs,
// poisoned, through the generic API.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ejk/half.h"
#include "ejk/op.h"

namespace flash_bwd_test {

using namespace ejk;

enum class BiasKind { none, full, shared_batch, shared_heads, shared_both };
enum class SinkKind { none, per_head, shared };

// A dense attention mask: each pair visible with probability `density`; `holes` also hides
// query row 1 entirely and keys [64, 128) from every query (whole tiles of 32 or 64 keys).
struct DenseMask {
  double density = 0.5;
  bool shared_batch = false, shared_heads = false;  // [1, .., Sq, Sk] / [.., 1, Sq, Sk]
  bool holes = false;
};

struct Problem {
  int64_t b = 2, sq = 37, sk = 45, hq = 4, hkv = 2, d = 64;
  DType dtype = DType::f32;
  bool causal = false, segments = false, varlen = false;
  bool d_lse = false;  // a random d_lse (the gradient of lse) as well
  std::optional<std::array<int64_t, 2>> window;
  std::optional<double> softcap, scale;
  BiasKind bias = BiasKind::none;
  SinkKind sinks = SinkKind::none;
  int64_t num_sinks = 2;
  std::optional<double> dropout_prob;  // with dropout_seed, for the forward and the backward
  int64_t dropout_seed = 0;
  std::optional<DenseMask> mask;
  std::string name() const;
};

// Host tensors of one problem (values rounded to the dtype), with the forward's outputs.
struct Case {
  Problem p;
  std::vector<std::pair<std::string, Tensor>> inputs;   // forward inputs, then out, lse, d_out
  std::vector<std::pair<std::string, Tensor>> outputs;  // dq, dk, dv (+ dbias, dsoftmax_aux)
  Args scalars;                                         // the scalars alone
  Args forward_args() const;                            // forward inputs + scalars
  Args backward_args() const;                           // everything, outputs included
  const Tensor& get(const std::string& name) const;
};

struct Mismatch {
  double rel_l2 = 0;
  bool nonfinite = false;
};

namespace detail {

inline Tensor random_typed(const Dims& shape, DType dtype, std::mt19937_64& rng, float stddev = 1.0f) {
  Tensor t = Tensor::empty(shape, dtype);
  std::normal_distribution<float> nd(0.0f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = nd(rng);
    if (dtype == DType::f32) t.data_as<float>()[i] = x;
    else t.data_as<uint16_t>()[i] = dtype == DType::bf16 ? float_to_bf16(x) : float_to_f16(x);
  }
  return t;
}

// n lengths >= 1 (when total >= n) summing to total, as offsets from 0.
inline std::vector<int32_t> random_cum(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int64_t> cuts;
  const int64_t slack = total - n;
  std::uniform_int_distribution<int64_t> u(0, slack);
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(u(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cum{0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hi = i + 1 < n ? cuts[size_t(i)] : slack, lo = i == 0 ? 0 : cuts[size_t(i - 1)];
    cum.push_back(int32_t(cum.back() + (hi - lo) + 1));
  }
  return cum;
}

inline Tensor i32(const std::vector<int32_t>& v, Dims shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

inline Tensor segments(int64_t b, int64_t len, int64_t nseg, bool pad_tail, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < b; ++i) {
    const auto cum = random_cum(std::min(nseg, len), len, rng);
    for (size_t s = 0; s + 1 < cum.size(); ++s)
      for (int32_t j = cum[s]; j < cum[s + 1]; ++j) ids.push_back(int32_t(s));
    if (pad_tail && len > 2)
      for (int64_t j = len - len / 5; j < len; ++j) ids[size_t(i * len + j)] = -1;
  }
  return i32(ids, {b, len});
}

inline Tensor dense_mask(const DenseMask& m, int64_t b, int64_t h, int64_t sq, int64_t sk, std::mt19937_64& rng) {
  Tensor t = Tensor::empty({m.shared_batch ? 1 : b, m.shared_heads ? 1 : h, sq, sk}, DType::u8);
  std::bernoulli_distribution visible(m.density);
  auto* x = t.data_as<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t q = i / sk % sq, k = i % sk;
    x[i] = m.holes && (q == 1 || (k >= 64 && k < 128)) ? 0 : uint8_t(visible(rng) ? 1 + rng() % 255 : 0);
  }
  return t;
}

inline void poison(Tensor& t) { std::memset(t.data(), 0xff, t.nbytes()); }

}  // namespace detail

inline std::string Problem::name() const {
  return fmt::format("{} b{} sq{} sk{} h{}/{} d{}{}{}{}{}{}{} bias{} sinks{}{}{}", dtype_name(dtype), b, sq, sk, hq, hkv, d,
                     d_lse ? " d_lse" : "",
                     causal ? " causal" : "", window ? fmt::format(" win{},{}", (*window)[0], (*window)[1]) : "",
                     softcap ? fmt::format(" cap{}", *softcap) : "", segments ? " seg" : "", varlen ? " varlen" : "",
                     int(bias), int(sinks), dropout_prob ? fmt::format(" drop{}", *dropout_prob) : "",
                     mask ? fmt::format(" mask{}{}{}{}", mask->density, mask->shared_batch ? " /b" : "",
                                        mask->shared_heads ? " /h" : "", mask->holes ? " holes" : "")
                          : "");
}

inline const Tensor& Case::get(const std::string& name) const {
  for (const auto* list : {&inputs, &outputs})
    for (const auto& [n, t] : *list)
      if (n == name) return t;
  throw std::logic_error("no tensor " + name);
}

inline Args Case::forward_args() const {
  Args a = scalars;
  for (const auto& [n, t] : inputs)
    if (n != "out" && n != "lse" && n != "d_out" && n != "d_lse") a.set(n, t.view());
  return a;
}

inline Args Case::backward_args() const {
  Args a = scalars;
  for (const auto& [n, t] : inputs) a.set(n, t.view());
  for (const auto& [n, t] : outputs) a.set(n, t.view());
  return a;
}

// Random inputs (normal; segment ids in runs with a padded query tail; varlen lengths summing
// to sq and sk), the forward on `forward_on`, a random d_out, NaN-poisoned host outputs.
inline Case make_case(const Problem& p, uint64_t seed, Device forward_on = {}) {
  Case c;
  c.p = p;
  std::mt19937_64 rng(seed);
  const Dims qs = p.varlen ? Dims{p.sq, p.hq, p.d} : Dims{p.b, p.sq, p.hq, p.d};
  const Dims ks = p.varlen ? Dims{p.sk, p.hkv, p.d} : Dims{p.b, p.sk, p.hkv, p.d};
  c.inputs.emplace_back("q", detail::random_typed(qs, p.dtype, rng));
  c.inputs.emplace_back("k", detail::random_typed(ks, p.dtype, rng));
  c.inputs.emplace_back("v", detail::random_typed(ks, p.dtype, rng));
  if (p.bias != BiasKind::none) {
    const bool sb = p.bias == BiasKind::shared_batch || p.bias == BiasKind::shared_both;
    const bool sh = p.bias == BiasKind::shared_heads || p.bias == BiasKind::shared_both;
    c.inputs.emplace_back("bias", detail::random_typed({sb ? 1 : p.b, sh ? 1 : p.hq, p.sq, p.sk}, p.dtype, rng));
  }
  if (p.segments) {
    const int64_t nseg = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    c.inputs.emplace_back("q_segment_ids", detail::segments(p.b, p.sq, nseg, true, rng));
    c.inputs.emplace_back("kv_segment_ids", detail::segments(p.b, p.sk, nseg, false, rng));
  }
  if (p.mask) c.inputs.emplace_back("attention_mask", detail::dense_mask(*p.mask, p.b, p.hq, p.sq, p.sk, rng));
  if (p.varlen) {
    c.inputs.emplace_back("cum_seqlens_q", detail::i32(detail::random_cum(p.b, p.sq, rng), {p.b + 1}));
    c.inputs.emplace_back("cum_seqlens_k", detail::i32(detail::random_cum(p.b, p.sk, rng), {p.b + 1}));
  }
  if (p.sinks != SinkKind::none)
    c.inputs.emplace_back("softmax_aux", detail::random_typed(p.sinks == SinkKind::shared ? Dims{p.num_sinks}
                                                                                   : Dims{p.hq, p.num_sinks},
                                                      DType::f32, rng));
  if (p.causal) c.scalars.set("causal", true);
  if (p.window) c.scalars.set("sliding_window", *p.window);
  if (p.softcap) c.scalars.set("logits_soft_cap", *p.softcap);
  if (p.scale) c.scalars.set("softmax_scale", *p.scale);
  if (p.dropout_prob) c.scalars.set("dropout_prob", *p.dropout_prob).set("dropout_seed", p.dropout_seed);
  // The forward: out and lse as training saves them.
  Tensor out = Tensor::empty(qs, p.dtype), lse = Tensor::empty(p.varlen ? Dims{1, p.hq, p.sq} : Dims{p.b, p.hq, p.sq},
                                                             DType::f32);
  if (forward_on.kind == DeviceKind::cpu) {
    Args f = c.forward_args();
    f.set("out", out.view()).set("lse", lse.view());
    run("flash_attention", f);
  } else {  // the forward on that device (a GPU build may have no CPU JIT for the features)
    std::vector<Tensor> keep;
    Args f = c.scalars;
    for (const auto& [n, t] : c.inputs) f.set(n, keep.emplace_back(t.to(forward_on)).view());
    Tensor out_d = out.to(forward_on), lse_d = lse.to(forward_on);
    f.set("out", out_d.view()).set("lse", lse_d.view());
    run("flash_attention", f);
    synchronize(forward_on);
    out = out_d.to(Device{}), lse = lse_d.to(Device{});
  }
  c.inputs.emplace_back("out", out);
  c.inputs.emplace_back("lse", lse);
  c.inputs.emplace_back("d_out", detail::random_typed(qs, p.dtype, rng));
  if (p.d_lse) c.inputs.emplace_back("d_lse", detail::random_typed(c.get("lse").shape(), DType::f32, rng));
  c.outputs.emplace_back("dq", Tensor::empty(qs, p.dtype));
  c.outputs.emplace_back("dk", Tensor::empty(ks, p.dtype));
  c.outputs.emplace_back("dv", Tensor::empty(ks, p.dtype));
  if (p.bias != BiasKind::none) c.outputs.emplace_back("dbias", Tensor::empty(c.get("bias").shape(), p.dtype));
  if (p.sinks != SinkKind::none)
    c.outputs.emplace_back("dsoftmax_aux", Tensor::empty(c.get("softmax_aux").shape(), DType::f32));
  for (auto& [n, t] : c.outputs) detail::poison(t);
  return c;
}

// Element `i` of a typed floating tensor (contiguous) as double.
inline double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(t.data_as<uint16_t>()[i]);
    case DType::f16: return f16_to_float(t.data_as<uint16_t>()[i]);
    default: throw std::logic_error("not a floating tensor");
  }
}

// Relative L2 error of a typed tensor against float64 values (infinite when any is not finite).
inline Mismatch compare(const Tensor& got, const std::vector<double>& want) {
  Mismatch m;
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double x = value_at(got, i), y = want[size_t(i)];
    if (!std::isfinite(x)) m.nonfinite = true;
    num += (x - y) * (x - y), den += y * y;
  }
  m.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  if (m.nonfinite) m.rel_l2 = INFINITY;
  return m;
}

// Per element of dsoftmax_aux, the sum of its terms' magnitudes |exp(sink_t - lse_i) D_i| over the
// rows it sums (D_i = d_out_i . out_i - dlse_i, from the case's typed values): the terms have
// both signs and may cancel to far less than their size, while the rounding of out and lse
// errs relative to each term. An error bound for dsoftmax_aux is a tolerance times this.
inline std::vector<double> sink_term_sizes(const Case& c) {
  const Problem& p = c.p;
  const Tensor &sinks = c.get("softmax_aux"), &lse = c.get("lse"), &out = c.get("out"), &d_out = c.get("d_out");
  const Tensor* d_lse = p.d_lse ? &c.get("d_lse") : nullptr;
  const bool shared = sinks.shape().size() == 1;
  const int64_t rows = p.varlen ? p.sq : p.b * p.sq;  // query rows of every sequence, one head
  std::vector<double> size(size_t(sinks.numel()), 0.0);
  for (int64_t h = 0; h < p.hq; ++h)
    for (int64_t r = 0; r < rows; ++r) {
      // lse is [B, Hq, Sq] (varlen [1, Hq, Tq]); out and d_out are rows of [.., Hq, D].
      const int64_t li = p.varlen ? h * p.sq + r : (r / p.sq * p.hq + h) * p.sq + r % p.sq;
      const double l = lse.data_as<float>()[li];
      if (!std::isfinite(l)) continue;
      double delta = d_lse ? -double(d_lse->data_as<float>()[li]) : 0.0;
      for (int64_t d = 0; d < p.d; ++d) delta += value_at(out, (r * p.hq + h) * p.d + d) * value_at(d_out, (r * p.hq + h) * p.d + d);
      for (int64_t t = 0; t < p.num_sinks; ++t) {
        const int64_t at = shared ? t : h * p.num_sinks + t;
        size[size_t(at)] += std::abs(std::exp(double(sinks.data_as<float>()[at]) - l) * delta);
      }
    }
  return size;
}

// Whether every element of dsoftmax_aux is within tol times its terms' size (sink_term_sizes).
inline bool sinks_within(const Case& c, const Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> size = sink_term_sizes(c);
  for (int64_t t = 0; t < got.numel(); ++t)
    if (!(std::abs(value_at(got, t) - want[size_t(t)]) <= tol * size[size_t(t)])) return false;
  return true;
}

}  // namespace flash_bwd_test
