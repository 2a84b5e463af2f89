// Random packed lengths, their longest sequence and segment ids, for the attention CLI cases
// (flash attention forward and backward, blocksparse attention).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/op.h"
#include "ejk/tensor.h"
#include "op_case.h"
#include "parse.h"

namespace ejk::cli::flash_inputs {

// Random cut points: n lengths summing to total, each >= 1 when total >= n.
inline std::vector<int32_t> random_cum(int64_t n, int64_t total, std::mt19937_64& rng) {
  const int64_t slack = total >= n ? total - n : total, base = total >= n ? 1 : 0;
  std::uniform_int_distribution<int64_t> u(0, slack);
  std::vector<int64_t> cuts;
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(u(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int32_t> cum{0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hi = i + 1 < n ? cuts[i] : slack, lo = i == 0 ? 0 : cuts[i - 1];
    cum.push_back(int32_t(cum.back() + (hi - lo) + base));
  }
  return cum;
}

// Segment ids 0..nseg-1 in runs over each row of t [B, L]; the last pad(L) positions of a row
// are padding (-1), pad called once per row after its runs are drawn.
template <class Pad> void random_segments(Tensor& t, int64_t nseg, std::mt19937_64& rng, Pad pad) {
  const int64_t b = t.shape()[0], len = t.shape()[1];
  auto* ids = t.data_as<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    const auto cum = random_cum(nseg, len, rng);
    for (int64_t s = 0; s < nseg; ++s)
      for (int32_t j = cum[s]; j < cum[s + 1]; ++j) ids[i * len + j] = int32_t(s);
    for (int64_t j = len - std::min<int64_t>(pad(len), len); j < len; ++j) ids[i * len + j] = -1;
  }
}

// q_segment_ids or kv_segment_ids of a backward case: 1 to 3 segments, the count drawn with q's
// and shared by kv's (so a query's segment has keys), q's last eighth padding.
inline void backward_segment_ids(const std::string& name, Tensor& t, int64_t& nseg, std::mt19937_64& rng) {
  const bool q = name == "q_segment_ids";
  if (q) nseg = std::uniform_int_distribution<int64_t>(1, 3)(rng);
  random_segments(t, nseg, rng, [&](int64_t len) { return q && len > 4 ? len / 8 : 0; });
}

// The offsets were checked by the op (i32, non-decreasing) before this reads them.
inline int64_t longest(const Tensor& cum) {
  const auto* c = cum.data_as<int32_t>();
  int64_t m = 0;
  for (int64_t i = 1; i < cum.numel(); ++i) m = std::max<int64_t>(m, int64_t(c[i]) - int64_t(c[i - 1]));
  return m;
}

// A dense attention mask: each byte 1 (visible) with probability `density`, else 0.
inline void random_mask(Tensor& t, double density, std::mt19937_64& rng) {
  std::bernoulli_distribution visible(density);
  auto* x = t.data_as<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = visible(rng) ? 1 : 0;
}

// The --mask-density option's value, a probability.
inline double mask_density(const std::string& text) {
  const double p = parse_float(text, "--mask-density");
  if (!(p >= 0 && p <= 1)) throw InvalidArgument("--mask-density: expected a probability in [0, 1], got " + text);
  return p;
}

// A backward case's forward on the case's inputs and scalars, into its out and lse (what
// training saves for the backward).
// The forward's out and lse for a backward problem, by the CPU kernel; where that variant cannot
// be had here (outside the AOT set of a build without the CPU JIT, or EJK_DISABLE_JIT: a GPU
// machine checking its backward), by the float64 reference rounded to the tensors' dtypes.
inline void run_forward_into_saved(const char* forward_op, HostCase& c) {
  Args f;
  for (const auto& [name, t] : c.inputs)
    if (name != "out" && name != "lse" && name != "d_out") f.set(name, t.view());
  for (const auto& [name, value] : c.scalars) f.set(name, value);
  f.set("out", c.input("out")->view()).set("lse", c.input("lse")->view());
  try {
    run(forward_op, f);
  } catch (const CompileError& e) {
    std::fprintf(stderr, "ejk: the saved out and lse come from the float64 reference: %s\n", e.what());
    for (const ReferenceOutput& r : reference(forward_op, f)) {
      if (r.name != "out" && r.name != "lse") continue;
      Tensor exact = Tensor::empty(r.shape, DType::f32);
      std::transform(r.values.begin(), r.values.end(), exact.data_as<float>(), [](double x) { return float(x); });
      for (auto& [name, t] : c.inputs)
        if (name == r.name) t = from_f32(exact, t.dtype());
    }
  }
}

}  // namespace ejk::cli::flash_inputs
