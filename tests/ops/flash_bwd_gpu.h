// The flash backward's CUDA tests' shared steps: a case's tensors on the GPU, and the GPU's
// gradients against the float64 reference.
#pragma once
#include <catch2/catch_test_macros.hpp>

#include <fmt/format.h>

#include <algorithm>

#include "ejk/admin.h"
#include "flash_bwd_problem.h"

namespace flash_bwd_test {

inline const ejk::Device kGpu{ejk::DeviceKind::cuda, 0};

// The case's tensors copied to the GPU (outputs poisoned there too), the call's Args over them.
struct OnGpu {
  std::vector<std::pair<std::string, ejk::Tensor>> inputs, outputs;
  ejk::Args args;
};
inline OnGpu to_gpu(const Case& c) {
  OnGpu g;
  g.args = c.scalars;
  for (const auto& [n, t] : c.inputs) g.inputs.emplace_back(n, t.to(kGpu));
  for (const auto& [n, t] : c.outputs) g.outputs.emplace_back(n, t.to(kGpu));  // NaN bytes copied
  for (const auto& [n, t] : g.inputs) g.args.set(n, t.view());
  for (const auto& [n, t] : g.outputs) g.args.set(n, t.view());
  return g;
}

// Every gradient the GPU run of key wrote into g, against the float64 reference of c's
// backward: finite, within 2e-2 rel-L2; dsoftmax_aux's terms cancel, so its bound is relative
// to their size (sink_term_sizes).
inline void check_gpu_gradients(const Problem& p, const Case& c, const OnGpu& g, const std::string& key) {
  using namespace ejk;
  const std::vector<ReferenceOutput> ref = reference("flash_attention_backward", c.backward_args());
  for (const auto& [name, t] : g.outputs) {
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    const Mismatch e = compare(t.to(Device{}), r->values);
    INFO(fmt::format("{}: {} -> {}: rel_l2 {:.3e}", name, p.name(), key, e.rel_l2));
    CHECK_FALSE(e.nonfinite);
    if (name == "dsoftmax_aux") CHECK(sinks_within(c, t.to(Device{}), r->values, 2e-2));
    else CHECK(e.rel_l2 <= 2e-2);
  }
}

}  // namespace flash_bwd_test
