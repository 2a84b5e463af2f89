// grouped_matmul and grouped_matmul_backward through the generic API: empty groups, all rows in
// one group, m not a multiple of any tile, rows past the sizes' sum, a group offset with more
// sizes than computed groups, weights stored transposed, existing_out, f32 or 16-bit outputs,
// padded rows, f32/bf16/f16, on the CPU and (where a GPU can run) on CUDA, against the float64
// reference into poisoned outputs with fences. The reference's gradients are checked against
// central differences of its forward. Bad inputs must name the argument.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/half.h"
#include "ejk/op.h"
#include "host_case.h"
#include "op_case.h"
#include "run_cmd.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;

namespace {

struct Problem {
  DType dtype = DType::f32, out_dtype = DType::f32;
  int64_t m = 70, k = 24, n = 40;
  std::vector<int32_t> sizes{10, 0, 33, 27};  // GS entries
  int64_t groups = 4;                         // G <= GS
  int offset = -1;                            // group_offset, -1: not given
  bool transposed = false, existing = false;
  int64_t pad = 0;  // elements between rows of lhs and d_out beyond their last dim
  std::string name() const {
    return fmt::format("{}->{} m {} k {} n {} sizes [{}] G {} offset {} t {} ex {} pad {}", dtype_name(dtype),
                       dtype_name(out_dtype), m, k, n, fmt::join(sizes, ","), groups, offset, transposed, existing, pad);
  }
};

constexpr int64_t kFence = 5;

// A tensor with its storage: view into storage, kFence poisoned elements each side for outputs.
struct Buffer {
  Tensor storage;
  TensorView view;
};

Buffer input(const Dims& shape, DType dtype, int64_t pad, std::mt19937_64& rng) {
  Dims strides = contiguous_strides(shape);
  if (shape.size() == 2) strides[0] = shape[1] + pad;
  Buffer b;
  b.storage = Tensor::empty({std::max<int64_t>(1, shape[0] * strides[0])}, dtype);
  cli::fill_normal(b.storage, rng);
  b.view = {b.storage.data(), dtype, {}, shape, strides};
  return b;
}

Buffer poisoned(const Dims& shape, DType dtype) {
  const int64_t n = TensorView{nullptr, dtype, {}, shape, contiguous_strides(shape)}.numel();
  Buffer b;
  b.storage = Tensor::empty({n + 2 * kFence}, dtype);
  std::memset(b.storage.data(), 0xff, b.storage.nbytes());
  b.view = {static_cast<char*>(b.storage.data()) + kFence * dtype_size(dtype), dtype, {}, shape,
            contiguous_strides(shape)};
  return b;
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data_as<float>()[i];
    case DType::bf16: return bf16_to_float(t.data_as<uint16_t>()[i]);
    default: return f16_to_float(t.data_as<uint16_t>()[i]);
  }
}

struct Call {
  std::vector<std::pair<std::string, Buffer>> inputs, outputs;
  Args args() const {
    Args a;
    for (const auto& [name, b] : inputs) a.set(name, b.view);
    for (const auto& [name, b] : outputs) a.set(name, b.view);
    return a;
  }
};

Call make_call(const Problem& p, bool backward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call c;
  c.inputs.emplace_back("lhs", input({p.m, p.k}, p.dtype, p.pad, rng));
  if (p.transposed) c.inputs.emplace_back("rhs_t", input({p.groups, p.n, p.k}, p.dtype, 0, rng));
  else c.inputs.emplace_back("rhs", input({p.groups, p.k, p.n}, p.dtype, 0, rng));
  Buffer sizes;
  sizes.storage = Tensor::empty({int64_t(p.sizes.size())}, DType::i32);
  std::copy(p.sizes.begin(), p.sizes.end(), sizes.storage.data_as<int32_t>());
  sizes.view = sizes.storage.view();
  c.inputs.emplace_back("group_sizes", sizes);
  if (p.offset >= 0) {
    Buffer o;
    o.storage = Tensor::empty({1}, DType::i32);
    o.storage.data_as<int32_t>()[0] = p.offset;
    o.view = o.storage.view();
    c.inputs.emplace_back("group_offset", o);
  }
  if (!backward) {
    if (p.existing) c.inputs.emplace_back("existing_out", input({p.m, p.n}, p.out_dtype, 0, rng));
    c.outputs.emplace_back("out", poisoned({p.m, p.n}, p.out_dtype));
    return c;
  }
  c.inputs.emplace_back("d_out", input({p.m, p.n}, p.out_dtype, p.pad, rng));
  c.outputs.emplace_back("dlhs", poisoned({p.m, p.k}, p.dtype));
  c.outputs.emplace_back("drhs", poisoned(p.transposed ? Dims{p.groups, p.n, p.k} : Dims{p.groups, p.k, p.n}, p.dtype));
  return c;
}

const char* op_name(bool backward) { return backward ? "grouped_matmul_backward" : "grouped_matmul"; }
Device gpu() { return {DeviceKind::cuda, 0}; }

// Runs p on `device` into poisoned outputs and checks each against the reference: rel-L2 within
// the dtype's tolerance, no NaN, fences untouched.
void check_problem(const Problem& p, bool backward, Device device, uint64_t seed) {
  Call c = make_call(p, backward, seed);
  Args args;
  std::vector<Tensor> dev;  // device copies of the storages, inputs then outputs
  auto place = [&](const Buffer& b) {
    if (device.kind == DeviceKind::cpu) return b.view;
    dev.push_back(b.storage.to(device));
    TensorView v = b.view;
    v.device = device;
    v.data = static_cast<char*>(dev.back().data()) +
             (static_cast<const char*>(b.view.data) - static_cast<const char*>(b.storage.data()));
    return v;
  };
  for (const auto& [name, b] : c.inputs) args.set(name, place(b));
  for (const auto& [name, b] : c.outputs) args.set(name, place(b));
  const RunInfo info = run(op_name(backward), args);
  synchronize(device);
  const std::vector<ReferenceOutput> ref = reference(op_name(backward), c.args());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const auto& [name, b] = c.outputs[i];
    const Tensor host =
        device.kind == DeviceKind::cpu ? b.storage : dev[dev.size() - c.outputs.size() + i].to(Device{});
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    REQUIRE(r != ref.end());
    double num = 0, den = 0;
    bool finite = true, fence = true;
    const int64_t n = int64_t(r->values.size());
    for (int64_t e = 0; e < n; ++e) {
      const double got = element(host, kFence + e), want = r->values[size_t(e)];
      finite = finite && std::isfinite(got);
      num += (got - want) * (got - want), den += want * want;
    }
    const auto* bytes = static_cast<const unsigned char*>(host.data());
    const size_t es = dtype_size(host.dtype());
    for (int64_t e = 0; e < host.numel(); ++e)
      if (e < kFence || e >= kFence + n)
        for (size_t q = 0; q < es; ++q) fence = fence && bytes[size_t(e) * es + q] == 0xff;
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const bool narrow = p.dtype != DType::f32 || b.view.dtype != DType::f32;
    INFO(fmt::format("{} {}: {} -> {}: rel_l2 {:.3e}", op_name(backward), name, p.name(), info.key, rel));
    CHECK(finite);
    CHECK(rel <= (narrow ? (backward ? 2e-2 : 1e-2) : 1e-5));
    CHECK(fence);
  }
}

// The edge cases, in `dtype` (outputs f32, or the dtype where out_narrow).
std::vector<Problem> problems(DType dtype) {
  std::vector<Problem> v;
  Problem base;
  base.dtype = dtype;
  v.push_back(base);  // an empty group; m not a multiple of 32 or 64
  Problem one = base;  // all rows in one group, several row tiles
  one.m = 130, one.sizes = {130}, one.groups = 1;
  v.push_back(one);
  Problem short_sum = base;  // rows past the sizes' sum, a size past m (clamped)
  short_sum.sizes = {5, 20, 0, 9}, v.push_back(short_sum);
  short_sum.sizes = {50, 0, 40, 9}, v.push_back(short_sum);
  Problem offset = base;  // GS > G: groups 2 .. 4 of 6 computed, the others' rows are 0
  offset.sizes = {7, 12, 9, 0, 21, 15}, offset.groups = 3, offset.offset = 2, offset.transposed = true;
  v.push_back(offset);
  Problem tail = base;  // GS > G without group_offset: the first G groups
  tail.sizes = {3, 30, 20, 17}, tail.groups = 2, tail.existing = true, tail.pad = 3;
  v.push_back(tail);
  Problem wide = base;  // K and N past one panel and tile, transposed, existing_out
  wide.m = 97, wide.k = 150, wide.n = 131, wide.sizes = {40, 1, 56}, wide.groups = 3;
  wide.transposed = wide.existing = true;
  v.push_back(wide);
  if (dtype != DType::f32) {
    Problem narrow = wide;  // out and existing_out in the dtype
    narrow.out_dtype = dtype, v.push_back(narrow);
  }
  Problem empty = base;  // no rows at all
  empty.m = 0, empty.sizes = {0, 0, 0, 0};
  v.push_back(empty);
  return v;
}

}  // namespace

TEST_CASE("grouped matmul on the CPU matches the float64 reference, f32 and bf16", "[grouped_matmul][cpu]") {
  uint64_t seed = 1;
  for (DType dtype : {DType::f32, DType::bf16})
    for (const Problem& p : problems(dtype)) {
      check_problem(p, false, Device{}, seed++);
      check_problem(p, true, Device{}, seed++);
    }
}

TEST_CASE("grouped matmul on the CPU, f16 (JIT)", "[grouped_matmul][cpu]") {
  if (!cpu_jit_available()) SKIP("this build has no CPU JIT (EJK_ENABLE_ORC_JIT=OFF): f16 is not built in");
  uint64_t seed = 100;
  for (const Problem& p : problems(DType::f16)) {
    check_problem(p, false, Device{}, seed++);
    check_problem(p, true, Device{}, seed++);
  }
}

TEST_CASE("the reference backward of grouped matmul matches central differences", "[grouped_matmul][reference]") {
  Problem p;
  p.m = 9, p.k = 3, p.n = 4, p.sizes = {2, 0, 5, 1}, p.groups = 3, p.offset = 1, p.transposed = true;
  Call fwd = make_call(p, false, 7), bwd = make_call(p, true, 7);  // the same lhs and rhs_t
  const std::vector<double> dout = [&] {
    const TensorView& v = bwd.inputs.back().second.view;  // d_out, f32 [m, n]
    return std::vector<double>(static_cast<const float*>(v.data), static_cast<const float*>(v.data) + p.m * p.n);
  }();
  auto loss = [&] {
    const auto r = reference("grouped_matmul", fwd.args());
    double s = 0;
    for (size_t i = 0; i < dout.size(); ++i) s += r[0].values[i] * dout[i];
    return s;
  };
  const auto grads = reference("grouped_matmul_backward", bwd.args());
  for (const auto& [input, grad] : {std::pair<const char*, const char*>{"lhs", "dlhs"}, {"rhs_t", "drhs"}}) {
    float* x = nullptr;
    for (auto& [name, b] : fwd.inputs) if (name == input) x = static_cast<float*>(b.view.data);
    const auto g = std::find_if(grads.begin(), grads.end(), [&](const ReferenceOutput& o) { return o.name == grad; });
    REQUIRE(g != grads.end());
    for (size_t i = 0; i < g->values.size(); ++i) {
      const float keep = x[i], h = 0.0625f;
      x[i] = keep + h;
      const double up = loss();
      x[i] = keep - h;
      const double down = loss();
      x[i] = keep;
      INFO(fmt::format("{} [{}]: fd {} vs {}", grad, i, (up - down) / (2 * h), g->values[i]));
      CHECK(std::abs((up - down) / (2 * h) - g->values[i]) <= 1e-4 * (1 + std::abs(g->values[i])));
    }
  }
}

TEST_CASE("bad grouped matmul input names the argument", "[grouped_matmul][errors]") {
  // p's call without the argument `skip`, which must fail with `what`.
  auto fails = [](Problem p, const std::string& skip, const std::string& what) {
    Call c = make_call(p, false, 3);
    Args a;
    for (const auto& list : {c.inputs, c.outputs})
      for (const auto& [name, b] : list)
        if (name != skip) a.set(name, b.view);
    INFO(what);
    CHECK_THROWS_WITH(run("grouped_matmul", a), ContainsSubstring(what));
  };
  Problem p;
  fails(p, "rhs", "rhs: required");
  Problem neg = p;
  neg.sizes = {10, -1, 33, 27};
  fails(neg, "", "group_sizes: entry 1 must be at least 0, got -1");
  Problem few = p;
  few.sizes = {10, 60}, few.groups = 4;
  fails(few, "", "group_sizes: dim 0 (GS) must be at least G = 4");
  Problem off = p;
  off.sizes = {10, 0, 33, 27, 0}, off.offset = 2;
  fails(off, "", "group_offset: must be in [0, 1]");
  Call c = make_call(p, false, 3);
  Tensor k_wrong = Tensor::empty({4, 25, 40}, DType::f32);
  Args a = c.args();
  a.set("rhs", k_wrong.view());
  CHECK_THROWS_WITH(run("grouped_matmul", a), ContainsSubstring("rhs") && ContainsSubstring("K"));
}

TEST_CASE("the CLI cases of grouped matmul make problems that check", "[grouped_matmul][cli]") {
  for (bool backward : {false, true}) {
    cli::OpCase* oc = nullptr;
    for (cli::OpCase* c : cli::op_cases()) if (std::string(c->op()) == op_name(backward)) oc = c;
    REQUIRE(oc != nullptr);
    for (std::vector<std::string> opts : std::vector<std::vector<std::string>>{
             {"--m", "90", "--k", "20", "--n", "30", "--groups", "3", "--transpose"},
             {"--m", "50", "--k", "8", "--n", "9", "--groups", "2", "--total-groups", "5", "--offset", "1", "--rows",
              "40"}}) {
      cli::ProblemParser(*oc).parse(opts);
      cli::HostCase hc;
      hc.op = oc->op();
      std::mt19937_64 rng(17);
      for (const cli::InputSpec& in : oc->inputs(DType::f32)) {
        Tensor t = Tensor::empty(in.shape, in.dtype);
        oc->fill(in.name, t, rng);
        hc.inputs.emplace_back(in.name, std::move(t));
      }
      Args args = hc.args();
      std::vector<std::pair<std::string, Tensor>> outs;
      for (const OutputSpec& o : output_specs(oc->op(), args)) outs.emplace_back(o.name, Tensor::empty(o.shape, o.dtype));
      for (auto& [name, t] : outs) {
        std::memset(t.data(), 0xff, t.nbytes());
        args.set(name, t.view());
      }
      run(oc->op(), args);
      const auto ref = reference(oc->op(), hc.args());
      for (const auto& [name, t] : outs) {
        const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
        REQUIRE(r != ref.end());
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = 0; i < r->values.size(); ++i) {
          const double got = t.data_as<float>()[i];
          finite = finite && std::isfinite(got);
          num += (got - r->values[i]) * (got - r->values[i]), den += r->values[i] * r->values[i];
        }
        INFO(fmt::format("{}: {}: rel_l2 {:.3e}", oc->op(), name, std::sqrt(num / den)));
        CHECK(finite);
        CHECK(std::sqrt(num / den) <= 1e-5);
      }
    }
  }
}

TEST_CASE("grouped matmul on CUDA matches the float64 reference", "[grouped_matmul][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 500;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Problem& p : problems(dtype)) {
      check_problem(p, false, gpu(), seed++);
      check_problem(p, true, gpu(), seed++);
    }
  Problem big;  // many tiles per group, uneven groups
  big.dtype = DType::bf16, big.m = 3000, big.k = 256, big.n = 320, big.groups = 16;
  big.sizes = {0, 300, 1, 63, 64, 65, 500, 0, 700, 2, 128, 129, 400, 300, 100, 248};
  check_problem(big, false, gpu(), seed++);
  check_problem(big, true, gpu(), seed++);
}

TEST_CASE("grouped matmul on CUDA, the pipelined kernel's shapes", "[grouped_matmul][cuda][gpu]") {
  std::string why;
  if (!backend_available(Backend::cuda, &why)) SKIP("no usable GPU: " << why);
  uint64_t seed = 900;
  auto both = [&](const Problem& p) {
    check_problem(p, false, gpu(), seed++);
    check_problem(p, true, gpu(), seed++);
  };
  Problem p;  // uneven groups, empty ones, rows past the sum; tiles of 256 columns (n) and 128 (k)
  p.dtype = DType::bf16, p.m = 1000, p.k = 136, p.n = 264, p.groups = 7;
  p.sizes = {0, 129, 1, 300, 0, 255, 200};
  both(p);
  Problem t = p;  // transposed, existing_out, outputs and d_out in bf16, a group offset
  t.sizes = {17, 0, 129, 1, 300, 0, 255, 200, 40}, t.offset = 1, t.transposed = t.existing = true;
  t.out_dtype = DType::bf16;
  both(t);
  Problem h = p;  // f16, k of 512 (dlhs in 256-wide tiles), narrow n, one group with most rows
  h.dtype = h.out_dtype = DType::f16, h.m = 333, h.k = 512, h.n = 128, h.groups = 3, h.sizes = {100, 0, 233};
  both(h);
  Problem pad = p;  // rows of lhs and d_out 8 elements apart beyond their last dim
  pad.pad = 8;
  both(pad);
}
