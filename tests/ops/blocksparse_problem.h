// Block-sparse attention test problems shared by the CPU and CUDA tests: a problem's sizes and
// features, random inputs (a random block layout with one fully masked query block row, segment
// ids with a padded query tail, sinks), the relative L2 error and the reference's outputs.
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ejk/admin.h"
#include "ejk/op.h"
#include "host_case.h"

namespace ejk::test {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  int64_t b = 1, hq = 4, hkv = 2, sq = 96, sk = 128, d = 64, bq = 32, bk = 32;
  double density = 0.3;  // < 0: no block_mask
  bool per_head = false, causal = false, segments = false, softcap = false;
  int64_t window_left = -1, window_right = -1;  // -1: no window
  int64_t sinks = 0;                            // per head
  bool shared_sinks = false;                    // softmax_aux [S], one row for every head
  DType dtype = DType::f32;
  std::string name() const {
    return fmt::format("b{} hq{} hkv{} sq{} sk{} d{} blocks {}x{} density {} per_head {} causal {} window {},{} "
                       "segments {} softcap {} sinks {}{} {}",
                       b, hq, hkv, sq, sk, d, bq, bk, density, per_head, causal, window_left, window_right, segments,
                       softcap, sinks, shared_sinks ? " shared" : "", dtype_name(dtype));
  }
};

// The inputs of a problem, kept alive next to the Args that view them.
struct Inputs {
  std::map<std::string, Tensor> t;
  Args args;
};

inline Tensor random_tensor(const Dims& shape, DType dtype, std::mt19937_64& rng) {
  Tensor x = Tensor::empty(shape, dtype);
  cli::fill_normal(x, rng);
  return x;
}

inline Inputs make_inputs(const Problem& p, std::mt19937_64& rng) {
  Inputs in;
  in.t["q"] = random_tensor({p.b, p.hq, p.sq, p.d}, p.dtype, rng);
  in.t["k"] = random_tensor({p.b, p.hkv, p.sk, p.d}, p.dtype, rng);
  in.t["v"] = random_tensor({p.b, p.hkv, p.sk, p.d}, p.dtype, rng);
  if (p.density >= 0) {
    const int64_t nq = (p.sq + p.bq - 1) / p.bq, nk = (p.sk + p.bk - 1) / p.bk;
    Tensor m = Tensor::empty({p.b, p.per_head ? p.hq : 1, nq, nk}, DType::u8);
    std::bernoulli_distribution listed(p.density);
    for (int64_t i = 0; i < m.numel(); ++i) m.data_as<uint8_t>()[i] = listed(rng) ? 1 : 0;
    // The last query block row of the first plane fully masked.
    for (int64_t j = 0; j < nk; ++j) m.data_as<uint8_t>()[(nq - 1) * nk + j] = 0;
    in.t["block_mask"] = m;
  }
  if (p.segments) {
    // Two segments split at random points in q and k (the same ids), a padded query tail.
    Tensor qs = Tensor::empty({p.b, p.sq}, DType::i32), ks = Tensor::empty({p.b, p.sk}, DType::i32);
    for (int64_t b = 0; b < p.b; ++b) {
      const int64_t cut = std::uniform_int_distribution<int64_t>(1, std::min(p.sq, p.sk) - 1)(rng);
      for (int64_t i = 0; i < p.sq; ++i) qs.data_as<int32_t>()[b * p.sq + i] = i < cut ? 0 : (i < p.sq - 5 ? 1 : -1);
      for (int64_t j = 0; j < p.sk; ++j) ks.data_as<int32_t>()[b * p.sk + j] = j < cut ? 0 : 1;
    }
    in.t["q_segment_ids"] = qs, in.t["kv_segment_ids"] = ks;
  }
  if (p.sinks > 0)
    in.t["softmax_aux"] = random_tensor(p.shared_sinks ? Dims{p.sinks} : Dims{p.hq, p.sinks}, DType::f32, rng);
  for (auto& [name, x] : in.t) in.args.set(name, x.view());
  in.args.set("causal", p.causal).set("q_blocksize", p.bq).set("kv_blocksize", p.bk);
  if (p.window_left >= 0) in.args.set("sliding_window", std::array<int64_t, 2>{p.window_left, p.window_right});
  if (p.softcap) in.args.set("logits_soft_cap", 15.0);
  return in;
}

// Relative L2 error; infinite when either side has a NaN or the shapes differ.
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return kInf;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return kInf;
    if (std::isinf(got[i]) || std::isinf(want[i])) {
      if (got[i] != want[i]) return kInf;
      continue;
    }
    num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline std::vector<double> values_of(const Tensor& t) { return cli::to_double(t); }

inline const std::vector<double>& ref_of(const std::vector<ReferenceOutput>& refs, const std::string& name) {
  for (const ReferenceOutput& r : refs)
    if (r.name == name) return r.values;
  FAIL("no reference output " << name);
  static const std::vector<double> none;
  return none;
}

// Per element of dsoftmax_aux, the sum of its terms' magnitudes |exp(sink - lse_i) D_i| over the
// query rows it sums (D_i = d_out_i . out_i; [B, Hq, Sq, D] rows): the terms have both signs and
// may cancel to far less than their size, while 16-bit out and d_out err relative to each term.
// An error bound for dsoftmax_aux is a tolerance times this.
inline std::vector<double> sink_term_sizes(const Problem& p, const Tensor& sinks, const Tensor& out,
                                           const Tensor& lse, const Tensor& d_out) {
  const std::vector<double> o = values_of(out), g = values_of(d_out), l = values_of(lse), s = values_of(sinks);
  std::vector<double> size(s.size(), 0.0);
  for (int64_t row = 0; row < p.b * p.hq * p.sq; ++row) {
    if (!std::isfinite(l[size_t(row)])) continue;
    double delta = 0;
    for (int64_t x = 0; x < p.d; ++x) delta += o[size_t(row * p.d + x)] * g[size_t(row * p.d + x)];
    const int64_t h = row / p.sq % p.hq;
    for (int64_t t = 0; t < p.sinks; ++t) {
      const size_t at = size_t(p.shared_sinks ? t : h * p.sinks + t);
      size[at] += std::abs(std::exp(s[at] - l[size_t(row)]) * delta);
    }
  }
  return size;
}

// Whether every element of dsoftmax_aux is within tol times its terms' size.
inline bool sinks_within(const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<double>& size, double tol) {
  for (size_t t = 0; t < got.size(); ++t)
    if (!(std::abs(got[t] - want[t]) <= tol * size[t])) return false;
  return true;
}

}  // namespace ejk::test
