// state_space_v1 and state_space_v2 with cu_seqlens (packed sequences), forward and backward:
// on the CPU a packed call equals running each sequence alone bit for bit (the kernels walk a
// sequence in the same order either way, and da, dd add the sequences' shares in sequence
// order); every output is within the project's tolerance of the float64 reference, on the CPU
// and (where a GPU can run) on CUDA; empty sequences pass their state through; bad cu_seqlens
// is named with what was expected.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/half.h"
#include "ejk/op.h"
#include "host_case.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

// One op's tensors by role: per-token tensors with their trailing dims, per-sequence states,
// and the parameters shared by every sequence.
struct OpShape {
  std::string op;
  std::map<std::string, Dims> tokens, params;
  Dims state;
};

OpShape ssm1_shape(bool backward, bool gate) {
  const int64_t d = 19, n = 16;
  OpShape s{backward ? "state_space_v1_backward" : "state_space_v1", {{"x", {d}}, {"b", {n}}, {"c", {n}}, {"dt", {d}}},
            {{"a", {d, n}}, {"d", {d}}}, {d, n}};
  if (gate) s.tokens["gate"] = {d};
  if (backward) s.tokens["d_y"] = {d};
  return s;
}

OpShape ssm2_shape(bool backward) {
  const int64_t h = 4, p = 8, g = 2, n = 16;
  OpShape s{backward ? "state_space_v2_backward" : "state_space_v2",
            {{"x", {h, p}}, {"b", {g, n}}, {"c", {g, n}}, {"dt", {h}}}, {{"a", {h}}, {"d", {h}}}, {h, p, n}};
  if (backward) s.tokens["d_y"] = {h, p};
  return s;
}

Dims cat(const Dims& head, const Dims& tail) {
  Dims d = head;
  for (int64_t x : tail) d.push_back(x);
  return d;
}

// Random values exact in `dtype`: dt a softplus of normals, a in [-2, -0.5], else normals.
Tensor random_tensor(const std::string& name, const Dims& shape, DType dtype, std::mt19937_64& rng) {
  Tensor f = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> normal(0.0f, 1.0f), pre(-1.0f, 0.5f);
  std::uniform_real_distribution<float> decay(0.5f, 2.0f);
  for (int64_t i = 0; i < f.numel(); ++i)
    f.data_as<float>()[i] = name == "a"    ? -decay(rng)
                            : name == "dt" ? float(std::log1p(std::exp(double(pre(rng)))))
                                           : normal(rng);
  return dtype == DType::f32 ? f : cli::from_f32(f, dtype);
}

// A packed problem: inputs by name (tokens [1, T, ...], states [Bt, ...]) and cu_seqlens.
struct Packed {
  std::vector<int32_t> cu;
  std::map<std::string, Tensor> inputs;
};

Packed make_packed(const OpShape& s, const std::vector<int32_t>& cu, DType dtype, bool init, bool dht,
                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  Packed p{cu, {}};
  const int64_t T = cu.back(), seqs = int64_t(cu.size()) - 1;
  for (const auto& [name, tail] : s.tokens) p.inputs[name] = random_tensor(name, cat({1, T}, tail), dtype, rng);
  for (const auto& [name, shape] : s.params) p.inputs[name] = random_tensor(name, shape, DType::f32, rng);
  if (init) p.inputs["initial_state"] = random_tensor("s", cat({seqs}, s.state), DType::f32, rng);
  if (dht) p.inputs["d_final_state"] = random_tensor("s", cat({seqs}, s.state), DType::f32, rng);
  Tensor cu_t = Tensor::empty({seqs + 1}, DType::i32);
  std::memcpy(cu_t.data(), cu.data(), cu.size() * sizeof(int32_t));
  p.inputs["cu_seqlens"] = std::move(cu_t);
  return p;
}

// Rows [r0, r1) of a tensor's leading dim (the token dim after squeezing a leading 1 when
// `tokens`), as a contiguous copy [1, r1 - r0, ...] (tokens) or [r1 - r0, ...].
Tensor rows(const Tensor& t, int64_t r0, int64_t r1, bool tokens) {
  Dims shape = t.shape();
  const int lead = tokens ? 1 : 0;
  int64_t row = int64_t(dtype_size(t.dtype()));
  for (int64_t i = lead + 1; i < shape.size(); ++i) row *= shape[i];
  shape[lead] = r1 - r0;
  Tensor out = Tensor::empty(shape, t.dtype());
  if (r1 > r0) std::memcpy(out.data(), static_cast<const char*>(t.data()) + r0 * row, size_t((r1 - r0) * row));
  return out;
}

using Outputs = std::map<std::string, Tensor>;

// Runs `op` on `device` with `inputs` into outputs poisoned with 0xff (NaN); returns them on the host.
Outputs run_on(const std::string& op, const std::map<std::string, Tensor>& inputs, Device device) {
  Args args;
  std::vector<Tensor> keep;
  keep.reserve(inputs.size());
  for (const auto& [name, t] : inputs) {
    keep.push_back(device.kind == DeviceKind::cpu ? t : t.to(device));
    args.set(name, keep.back().view());
  }
  Outputs host, dev;
  for (const OutputSpec& o : output_specs(op, args)) {
    Tensor t = Tensor::empty(o.shape, o.dtype);
    std::memset(t.data(), 0xff, t.nbytes());
    dev[o.name] = device.kind == DeviceKind::cpu ? t : t.to(device);
    args.set(o.name, dev[o.name].view());
  }
  run(op, args);
  synchronize(device);
  for (auto& [name, t] : dev) host[name] = device.kind == DeviceKind::cpu ? t : t.to(Device{});
  return host;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(t.data_as<uint16_t>()[i]);
    default: return f16_to_float(t.data_as<uint16_t>()[i]);
  }
}

bool token_output(const std::string& name) {
  return name != "final_state" && name != "d_initial_state" && name != "da" && name != "dd";
}

// Packed outputs against the float64 reference: rel-L2 within the project's bound, no NaN.
void check_reference(const OpShape& s, const Packed& p, const Outputs& got, DType dtype, bool backward) {
  Args args;
  for (const auto& [name, t] : p.inputs) args.set(name, t.view());
  for (const auto& [name, t] : got) args.set(name, t.view());
  const double tol = dtype == DType::f32 ? 1e-5 : backward ? 2e-2 : 1e-2;
  for (const ReferenceOutput& r : reference(s.op, args)) {
    const Tensor& t = got.at(r.name);
    REQUIRE(int64_t(r.values.size()) == t.numel());
    double num = 0, den = 0;
    bool finite = true;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double g = element(t, i), w = r.values[size_t(i)];
      finite = finite && std::isfinite(g);
      num += (g - w) * (g - w), den += w * w;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    INFO(fmt::format("{} {} {} cu {}: rel_l2 {:.3e} (tol {})", s.op, r.name, dtype_name(dtype),
                     fmt::join(p.cu, ","), rel, tol));
    CHECK(finite);
    CHECK(rel <= tol);
  }
}

// The packed CPU call against each sequence run alone (dense, Bt = 1): bit-exact.
void check_alone(const OpShape& s, const Packed& p, const Outputs& packed) {
  const int64_t seqs = int64_t(p.cu.size()) - 1;
  std::map<std::string, std::vector<float>> sums;  // da, dd: the sequences' shares in order
  for (int64_t q = 0; q < seqs; ++q) {
    std::map<std::string, Tensor> in;
    for (const auto& [name, t] : p.inputs) {
      if (name == "cu_seqlens") continue;
      if (s.tokens.count(name)) in[name] = rows(t, p.cu[size_t(q)], p.cu[size_t(q) + 1], true);
      else if (s.params.count(name)) in[name] = t;
      else in[name] = rows(t, q, q + 1, false);
    }
    const Outputs alone = run_on(s.op, in, Device{});
    for (const auto& [name, t] : alone) {
      const Tensor& whole = packed.at(name);
      INFO(fmt::format("{} {}: sequence {} of cu {}", s.op, name, q, fmt::join(p.cu, ",")));
      if (name == "da" || name == "dd") {
        auto& acc = sums[name];
        acc.resize(size_t(t.numel()), 0.0f);
        for (int64_t i = 0; i < t.numel(); ++i) acc[size_t(i)] += t.data_as<float>()[i];
        continue;
      }
      const bool tok = token_output(name);
      const Tensor part = tok ? rows(whole, p.cu[size_t(q)], p.cu[size_t(q) + 1], true) : rows(whole, q, q + 1, false);
      REQUIRE(part.nbytes() == t.nbytes());
      CHECK(std::memcmp(part.data(), t.data(), t.nbytes()) == 0);
    }
  }
  for (const auto& [name, acc] : sums) {
    INFO(fmt::format("{} {}: the sum over sequences", s.op, name));
    CHECK(std::memcmp(acc.data(), packed.at(name).data(), acc.size() * sizeof(float)) == 0);
  }
}

// Offsets of the problems: several with an empty one, one sequence, leading/trailing empties,
// no tokens at all, long enough for several checkpoint chunks.
std::vector<std::vector<int32_t>> offset_sets() {
  return {{0, 7, 7, 30, 33}, {0, 25}, {0, 0, 12, 40, 40}, {0, 1, 2, 3}, {0, 0, 0}};
}

std::vector<OpShape> shapes(bool backward) {
  return {ssm1_shape(backward, false), ssm1_shape(backward, true), ssm2_shape(backward)};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("varlen state_space on the CPU equals each sequence alone, bit for bit", "[ssm1][ssm2][varlen][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 11;
  for (bool backward : {false, true})
    for (const OpShape& s : shapes(backward))
      for (const auto& cu : offset_sets())
        for (DType dtype : {DType::f32, DType::bf16}) {
          const Packed p = make_packed(s, cu, dtype, true, backward, seed++);
          check_alone(s, p, run_on(s.op, p.inputs, Device{}));
        }
}

TEST_CASE("varlen state_space on the CPU matches the float64 reference", "[ssm1][ssm2][varlen][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  uint64_t seed = 200;
  for (bool backward : {false, true})
    for (const OpShape& s : shapes(backward))
      for (const auto& cu : offset_sets())
        for (DType dtype : {DType::f32, DType::bf16, DType::f16})
          for (bool init : {false, true}) {
            const Packed p = make_packed(s, cu, dtype, init, backward && init, seed++);
            check_reference(s, p, run_on(s.op, p.inputs, Device{}), dtype, backward);
          }
}

TEST_CASE("varlen state_space: an empty sequence's final state is its initial state", "[ssm1][ssm2][varlen][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): these keys are not built in");
  for (const OpShape& s : {ssm1_shape(false, true), ssm2_shape(false)}) {
    const Packed p = make_packed(s, {0, 5, 5, 9}, DType::f32, true, false, 3);
    const Outputs o = run_on(s.op, p.inputs, Device{});
    const Tensor h0 = rows(p.inputs.at("initial_state"), 1, 2, false), ht = rows(o.at("final_state"), 1, 2, false);
    CHECK(std::memcmp(h0.data(), ht.data(), h0.nbytes()) == 0);
  }
  // The backward: the empty sequence's d_initial_state is its d_final_state.
  for (const OpShape& s : {ssm1_shape(true, false), ssm2_shape(true)}) {
    const Packed p = make_packed(s, {0, 5, 5, 9}, DType::f32, true, true, 4);
    const Outputs o = run_on(s.op, p.inputs, Device{});
    const Tensor dht = rows(p.inputs.at("d_final_state"), 1, 2, false);
    const Tensor dh0 = rows(o.at("d_initial_state"), 1, 2, false);
    CHECK(std::memcmp(dht.data(), dh0.data(), dht.nbytes()) == 0);
  }
}

TEST_CASE("bad cu_seqlens is named with what was expected", "[ssm1][ssm2][varlen][errors]") {
  for (bool backward : {false, true})
    for (const OpShape& s : {ssm1_shape(backward, false), ssm2_shape(backward)}) {
      const Packed p = make_packed(s, {0, 4, 9, 12}, DType::f32, true, backward, 5);
      Args good;
      for (const auto& [name, t] : p.inputs) good.set(name, t.view());
      std::vector<Tensor> outs;
      for (const OutputSpec& o : output_specs(s.op, good)) outs.push_back(Tensor::empty(o.shape, o.dtype));
      size_t k = 0;
      for (const OutputSpec& o : output_specs(s.op, good)) good.set(o.name, outs[k++].view());
      auto with_cu = [&](const std::vector<int32_t>& cu) {
        Args a = good;
        Tensor bad = Tensor::empty({int64_t(cu.size())}, DType::i32);
        std::memcpy(bad.data(), cu.data(), cu.size() * sizeof(int32_t));
        a.set("cu_seqlens", bad.view());
        return error_of([&] { run(s.op, a); });
      };
      INFO(s.op);
      CHECK_THAT(with_cu({1, 4, 9, 12}), ContainsSubstring("cu_seqlens: must start at 0, got 1"));
      CHECK_THAT(with_cu({0, 9, 4, 12}), ContainsSubstring("cu_seqlens: must be non-decreasing"));
      CHECK_THAT(with_cu({0, 4, 9, 11}), ContainsSubstring("cu_seqlens: last entry must equal the packed length 12"));
      // Four offsets are three sequences: initial_state's count must match.
      CHECK_THAT(with_cu({0, 4, 12}), ContainsSubstring("initial_state"));
      Args a = good;
      Tensor wide = Tensor::empty({4}, DType::i64);
      a.set("cu_seqlens", wide.view());
      CHECK_THAT(error_of([&] { run(s.op, a); }), ContainsSubstring("cu_seqlens"));
    }
}

TEST_CASE("varlen state_space on CUDA matches the float64 reference", "[ssm1][ssm2][varlen][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  const Device gpu{DeviceKind::cuda, 0};
  uint64_t seed = 400;
  std::vector<std::vector<int32_t>> sets = offset_sets();
  sets.push_back({0, 300, 300, 1000, 1001, 1500});  // long sequences: many checkpoint chunks
  for (bool backward : {false, true})
    for (const OpShape& s : shapes(backward))
      for (const auto& cu : sets)
        for (DType dtype : {DType::f32, DType::bf16}) {
          const Packed p = make_packed(s, cu, dtype, true, backward, seed++);
          check_reference(s, p, run_on(s.op, p.inputs, gpu), dtype, backward);
        }
}
