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

inline void poison(Tensor& t) { std::memset(t.data(), 0xff, t.nbytes()); }

}  // namespace detail

inline std::string Problem::name() const {
  return fmt::format("{} b{} sq{} sk{} h{}/{} d{}{}{}{}{}{}{} bias{} sinks{}", dtype_name(dtype), b, sq, sk, hq, hkv, d,
                     d_lse ? " d_lse" : "",
                     causal ? " causal" : "", window ? fmt::format(" win{},{}", (*window)[0], (*window)[1]) : "",
                     softcap ? fmt::format(" cap{}", *softcap) : "", segments ? " seg" : "", varlen ? " varlen" : "",
                     int(bias), int(sinks));
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

}  // namespace flash_bwd_test
