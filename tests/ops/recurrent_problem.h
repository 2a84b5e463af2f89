// Recurrent attention problems for the tests: random inputs (q, k, v normal; gates log-sigmoids,
// so decays lie in (0, 1); g_gamma retention's per-head decays), placed dense, padded or
// token-major; outputs in poisoned (0xff: NaN) buffers with fences; comparisons against the
// float64 reference (rel-L2; NaN never passes).
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ejk/half.h"
#include "ejk/op.h"
#include "host_case.h"

namespace recurrent_test {

using namespace ejk;

// kGh: g_head, one scalar per token and head.
enum Gate : unsigned { kG = 1, kGamma = 2, kGk = 4, kGv = 8, kGh = 16 };

struct Problem {
  DType dtype = DType::f32;
  int64_t b = 2, t = 9, h = 2, k = 8, v = 20;  // varlen: b sequences packing t tokens
  unsigned gates = 0;
  bool init = false, reverse = false, varlen = false, state = true, dht = false;
  bool leading_one = false;  // varlen: q [1, T, H, K]
  int64_t pad = 0;           // elements between rows beyond the last dim (inputs)
  bool token_major = false;  // dense inputs stored [T, B, H, X]
  std::vector<int32_t> cu;   // varlen
  std::string name() const {
    return fmt::format("{} b {} t {} h {} k {} v {} gates {:x} init {} rev {} varlen {} state {} dht {} pad {} tm {}",
                       dtype_name(dtype), b, t, h, k, v, gates, init, reverse, varlen, state, dht, pad, token_major);
  }
};

// A tensor in a buffer of its own: `view` into `storage`.
struct Buffer {
  Tensor storage;
  TensorView view;
};

inline void fill_values(Tensor& t, std::mt19937_64& rng, bool log_decay) {
  if (!log_decay) return cli::fill_normal(t, rng);
  Tensor f = Tensor::empty(t.shape(), DType::f32);
  std::normal_distribution<float> nd(2.0f, 1.0f);
  for (int64_t i = 0; i < f.numel(); ++i) f.data_as<float>()[i] = -std::log1p(std::exp(-nd(rng)));
  const Tensor r = t.dtype() == DType::f32 ? f : cli::from_f32(f, t.dtype());
  std::memcpy(t.data(), r.data(), r.nbytes());
}

// A [B, T, H, X] (or [T, H, X]) input: rows `pad` apart beyond X, optionally token-major.
inline Buffer token_input(const Dims& shape, DType dtype, int64_t pad, bool token_major, std::mt19937_64& rng,
                          bool log_decay) {
  const int64_t rank = int64_t(shape.size()), x = shape.back() + pad;
  Dims strides = contiguous_strides(shape);
  strides[size_t(rank - 2)] = x;  // H
  if (rank == 4 && token_major) {
    strides[0] = shape[2] * x, strides[1] = shape[0] * shape[2] * x;
  } else {
    for (int64_t d = rank - 3; d >= 0; --d) strides[size_t(d)] = strides[size_t(d + 1)] * shape[size_t(d + 1)];
  }
  int64_t span = 1;
  for (int64_t d = 0; d < rank; ++d) span += shape[size_t(d)] > 0 ? (shape[size_t(d)] - 1) * strides[size_t(d)] : 0;
  Buffer b;
  b.storage = Tensor::empty({span + pad}, dtype);
  fill_values(b.storage, rng, log_decay);
  b.view = {b.storage.data(), dtype, {}, shape, strides};
  return b;
}

constexpr int64_t kFence = 7;

// A contiguous output poisoned with 0xff, kFence elements of fence on each side.
inline Buffer poisoned(const Dims& shape, DType dtype) {
  const int64_t n = TensorView{nullptr, dtype, {}, shape, contiguous_strides(shape)}.numel();
  Buffer b;
  b.storage = Tensor::empty({n + 2 * kFence}, dtype);
  std::memset(b.storage.data(), 0xff, b.storage.nbytes());
  b.view = {static_cast<char*>(b.storage.data()) + kFence * dtype_size(dtype), dtype, {}, shape,
            contiguous_strides(shape)};
  return b;
}

// The inputs of p (and the outputs' buffers) as named arguments.
struct Call {
  std::vector<std::pair<std::string, Buffer>> inputs, outputs;
  Tensor cu;
  bool varlen = false;
  Args inputs_only() const {
    Args a;
    for (const auto& [name, b] : inputs) a.set(name, b.view);
    if (varlen) a.set("cu_seqlens", cu.view());
    return a;
  }
  Args all(bool reverse) const {
    Args a = inputs_only();
    for (const auto& [name, b] : outputs) a.set(name, b.view);
    if (reverse) a.set("reverse", true);
    return a;
  }
};

inline std::vector<int32_t> random_cu(int64_t n, int64_t total, std::mt19937_64& rng) {
  std::vector<int64_t> cuts{0, total};
  for (int64_t i = 1; i < n; ++i)
    cuts.push_back(std::bernoulli_distribution(0.25)(rng) ? cuts.back() : std::uniform_int_distribution<int64_t>(0, total)(rng));
  std::sort(cuts.begin(), cuts.end());
  return {cuts.begin(), cuts.end()};
}

inline Call make_call(const Problem& p, bool backward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call c;
  const Dims lead = p.varlen ? (p.leading_one ? Dims{1, p.t} : Dims{p.t}) : Dims{p.b, p.t};
  auto tokens = [&](int64_t x) {
    Dims d = lead;
    d.push_back(p.h), d.push_back(x);
    return d;
  };
  auto input = [&](const char* name, int64_t x, bool gate) {
    c.inputs.emplace_back(name, token_input(tokens(x), p.dtype, p.pad, p.token_major && !p.varlen, rng, gate));
  };
  input("q", p.k, false), input("k", p.k, false), input("v", p.v, false);
  if (p.gates & kG) input("g", p.k, true);
  if (p.gates & kGk) input("gk", p.k, true);
  if (p.gates & kGv) input("gv", p.v, true);
  if (p.gates & kGh) {
    Dims d = lead;
    d.push_back(p.h);
    c.inputs.emplace_back("g_head", token_input(d, p.dtype, p.pad, false, rng, true));
  }
  if (p.gates & kGamma) {
    Buffer b;
    b.storage = Tensor::empty({p.h}, DType::f32);
    for (int64_t i = 0; i < p.h; ++i) b.storage.data_as<float>()[i] = float(std::log1p(-std::exp2(-2.0 - double(i))));
    b.view = b.storage.view();
    c.inputs.emplace_back("g_gamma", b);
  }
  const Dims state{p.b, p.h, p.k, p.v};
  auto state_input = [&](const char* name) {
    Buffer b;
    b.storage = Tensor::empty(state, DType::f32);
    cli::fill_normal(b.storage, rng);
    b.view = b.storage.view();
    c.inputs.emplace_back(name, b);
  };
  if (p.init) state_input("initial_state");
  c.varlen = p.varlen;
  if (p.varlen) {
    c.cu = Tensor::empty({p.b + 1}, DType::i32);
    const std::vector<int32_t> cu = p.cu.empty() ? random_cu(p.b, p.t, rng) : p.cu;
    std::copy(cu.begin(), cu.end(), c.cu.data_as<int32_t>());
  }
  if (!backward) {
    c.outputs.emplace_back("o", poisoned(tokens(p.v), p.dtype));
    if (p.state) c.outputs.emplace_back("final_state", poisoned(state, DType::f32));
    return c;
  }
  input("d_o", p.v, false);
  if (p.dht) state_input("d_final_state");
  for (const char* name : {"dq", "dk", "dg", "dgk"}) c.outputs.emplace_back(name, poisoned(tokens(p.k), p.dtype));
  for (const char* name : {"dv", "dgv"}) c.outputs.emplace_back(name, poisoned(tokens(p.v), p.dtype));
  c.outputs.emplace_back("d_initial_state", poisoned(state, DType::f32));
  return c;
}

inline double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(t.data_as<uint16_t>()[i]);
    default: return f16_to_float(t.data_as<uint16_t>()[i]);
  }
}

// An f32 view's elements in row-major order, through its strides.
inline std::vector<double> values(const TensorView& v) {
  std::vector<double> out;
  std::vector<int64_t> idx(size_t(v.rank()), 0);
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t at = 0;
    for (int64_t d = 0; d < v.rank(); ++d) at += idx[size_t(d)] * v.strides[d];
    out.push_back(static_cast<const float*>(v.data)[at]);
    for (int64_t d = v.rank() - 1; d >= 0 && ++idx[size_t(d)] == v.shape[d]; --d) idx[size_t(d)] = 0;
  }
  return out;
}

struct Mismatch {
  double rel_l2 = 0;
  bool nonfinite = false, fence_intact = true;
};

// Output `b` (a host copy `host` of its storage) against reference values.
inline Mismatch compare(const Buffer& b, const Tensor& host, const std::vector<double>& ref) {
  Mismatch e;
  double num = 0, den = 0;
  const int64_t n = int64_t(ref.size());
  for (int64_t i = 0; i < n; ++i) {
    const double got = element(host, kFence + i);
    if (!std::isfinite(got)) e.nonfinite = true;
    num += (got - ref[size_t(i)]) * (got - ref[size_t(i)]), den += ref[size_t(i)] * ref[size_t(i)];
  }
  const auto* bytes = static_cast<const unsigned char*>(host.data());
  const size_t es = dtype_size(host.dtype());
  for (int64_t i = 0; i < host.numel(); ++i)
    if (i < kFence || i >= kFence + n)
      for (size_t q = 0; q < es; ++q) e.fence_intact = e.fence_intact && bytes[size_t(i) * es + q] == 0xff;
  (void)b;
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

inline double tolerance(DType t, bool backward) { return t == DType::f32 ? 1e-5 : backward ? 2e-2 : 1e-2; }

}  // namespace recurrent_test
