// Every op with a CLI case, on every backend that runs here, against its float64 reference
// (ejk::reference) with the spec's tolerance. The problems are the case's own
// (cli/cases/<op>.problems: one line of `ejk run` options each; a case without the file fails
// here), made by the CLI's code, so `ejk run --check` and this test see the same inputs.
//
// Each problem runs in three placements of every tensor: contiguous; "padded" (16-byte aligned,
// rows further apart than their length); "shuffled" (one element off 16-byte alignment, odd row
// pitch, the two leading dims swapped in memory). Outputs are written into buffers poisoned with
// 0xff (NaN) and wider than the output: an element left unwritten fails the comparison, a write
// outside the view fails the fence check. The contiguous and padded placements must run; a
// shuffled one may instead be refused with an InvalidArgument naming the tensor.
#include <catch2/catch_test_macros.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "ejk/op.h"
#include "op_case.h"
#include "run_cmd.h"

using namespace ejk;
namespace fs = std::filesystem;

namespace {

enum class Placement { contiguous, padded, shuffled };
const char* placement_name(Placement p) {
  return p == Placement::contiguous ? "contiguous" : p == Placement::padded ? "padded" : "shuffled";
}

// A view into a host buffer of its own, wider than the view.
struct Buffer {
  Tensor storage;  // 1-D, the view's dtype
  TensorView view;
  int64_t base = 0;  // the view's first element in storage
};

// The strides and offset of `pl` for `shape`; whole-contiguous tensors keep contiguous strides.
Buffer place(const Dims& shape, DType dtype, Placement pl, bool keep_contiguous) {
  const int64_t rank = shape.size();
  const bool moved = pl != Placement::contiguous;
  const int64_t pad = !moved || keep_contiguous || rank < 2 ? 0 : pl == Placement::padded ? 8 : 1;
  Dims strides = contiguous_strides(shape);
  // Row pitch first, then outer dims; "shuffled" stores dim 1 outside dim 0.
  std::vector<int64_t> order(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) order[size_t(i)] = rank - 1 - i;  // innermost first
  if (pl == Placement::shuffled && !keep_contiguous && rank >= 3) std::swap(order[size_t(rank - 1)], order[size_t(rank - 2)]);
  int64_t step = 1;
  for (int64_t n = 0; n < rank; ++n) {
    const int64_t d = order[size_t(n)];
    strides[d] = step;
    step = step * std::max<int64_t>(shape[d], 1) + (n == 0 ? pad : 0);
  }
  int64_t span = 1;
  for (int64_t i = 0; i < rank; ++i) span += shape[i] > 0 ? (shape[i] - 1) * strides[i] : 0;
  Buffer b;
  b.base = !moved ? 0 : pl == Placement::padded ? 16 : 1;
  b.storage = Tensor::empty({b.base + span + 8}, dtype);
  std::memset(b.storage.data(), 0xff, b.storage.nbytes());
  b.view = {static_cast<char*>(b.storage.data()) + b.base * int64_t(dtype_size(dtype)), dtype, {}, shape, strides};
  return b;
}

// Calls f(strided element index) for each element of `v` in row-major order.
template <class F> void for_each_element(const TensorView& v, F&& f) {
  std::vector<int64_t> idx(static_cast<size_t>(v.rank()), 0);
  const int64_t n = v.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = 0;
    for (int64_t d = 0; d < v.rank(); ++d) at += idx[size_t(d)] * v.strides[d];
    f(i, at);
    for (int64_t d = v.rank() - 1; d >= 0 && ++idx[size_t(d)] == v.shape[d]; --d) idx[size_t(d)] = 0;
  }
}

Buffer placed_copy(const Tensor& t, Placement pl, bool keep_contiguous) {
  Buffer b = place(t.shape(), t.dtype(), pl, keep_contiguous);
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const char*>(t.data());
  auto* dst = static_cast<char*>(b.view.data);
  for_each_element(b.view, [&](int64_t i, int64_t at) { std::memcpy(dst + at * es, src + i * es, es); });
  return b;
}

// The view's values (from a host copy of its storage) and whether the rest still holds poison.
std::vector<double> read_back(const Buffer& b, const Tensor& host_storage, bool& fence_intact) {
  const size_t es = dtype_size(b.view.dtype);
  std::vector<char> inside(size_t(host_storage.numel()), 0);
  Tensor values = Tensor::empty(b.view.shape, b.view.dtype);
  const auto* src = static_cast<const char*>(host_storage.data()) + b.base * int64_t(es);
  for_each_element(b.view, [&](int64_t i, int64_t at) {
    std::memcpy(static_cast<char*>(values.data()) + i * es, src + at * es, es);
    inside[size_t(b.base + at)] = 1;
  });
  fence_intact = true;
  const auto* bytes = static_cast<const unsigned char*>(host_storage.data());
  for (size_t i = 0; i < inside.size(); ++i)
    for (size_t k = 0; k < es && !inside[i]; ++k) fence_intact = fence_intact && bytes[i * es + k] == 0xff;
  return cli::to_double(values);
}

// The case's problem lines (comments and blank lines dropped).
std::vector<std::string> problem_lines(const std::string& op) {
  const fs::path file = fs::path(EJK_SOURCE_DIR) / "cli" / "cases" / (op + ".problems");
  std::ifstream in(file);
  INFO(fmt::format("{} has no conformance problems: write {} (one line of `ejk run {}` options each)", op,
                   file.string(), op));
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t") != std::string::npos && line[line.find_first_not_of(" \t")] != '#')
      lines.push_back(line);
  REQUIRE(!lines.empty());
  return lines;
}

// The devices here whose backend the op's spec has kernels for (the CPU always).
std::vector<Device> devices(const OpInfo& info) {
  std::vector<Device> d{Device{}};
  const bool has_cuda = std::find(info.backends.begin(), info.backends.end(), "cuda") != info.backends.end();
  if (has_cuda && backend_available(Backend::cuda)) d.push_back(Device{DeviceKind::cuda, 0});
  return d;
}

bool whole_contiguous(const OpInfo& info, const std::string& name) {
  for (const OpTensorInfo& t : info.tensors)
    if (t.name == name) return t.contiguous;
  return false;
}

struct Outcome {
  bool ran = false;
  std::string refused;  // the InvalidArgument, when the placement was refused
};

// One run of the problem on `device` in placement `pl`, checked against `ref`.
Outcome run_placed(const std::string& op, const OpInfo& info, const cli::HostCase& c, Device device, Placement pl,
                   const std::vector<ReferenceOutput>& ref, double tol) {
  std::vector<Tensor> keep;
  Args args;
  auto set_placed = [&](const std::string& name, Buffer& b) {
    keep.push_back(device.kind == DeviceKind::cpu ? b.storage : b.storage.to(device));
    TensorView v = b.view;
    v.device = device;
    v.data = static_cast<char*>(keep.back().data()) + b.base * int64_t(dtype_size(v.dtype));
    args.set(name, v);
  };
  std::vector<Buffer> inputs;
  for (const auto& [name, t] : c.inputs) {
    inputs.push_back(placed_copy(t, pl, whole_contiguous(info, name)));
    set_placed(name, inputs.back());
  }
  for (const auto& [name, v] : c.scalars) args.set(name, v);
  std::vector<std::pair<std::string, Buffer>> outputs;
  for (const OutputSpec& s : output_specs(op, args)) {
    outputs.emplace_back(s.name, place(s.shape, s.dtype, pl, whole_contiguous(info, s.name)));
    set_placed(s.name, outputs.back().second);
  }
  try {
    run(op, args, Context{});
  } catch (const InvalidArgument& e) {
    if (pl != Placement::shuffled) throw;
    return {false, e.what()};
  }
  synchronize(device);
  size_t slot = c.inputs.size();
  for (auto& [name, b] : outputs) {
    const Tensor host = device.kind == DeviceKind::cpu ? keep[slot] : keep[slot].to(Device{});
    ++slot;
    bool fence = false;
    const std::vector<double> got = read_back(b, host, fence);
    const auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
    INFO("output " << name);
    REQUIRE(r != ref.end());
    const cli::OutputError e = cli::compare_output(name, got, r->values);
    INFO(fmt::format("rel_l2 {:.3e} max_abs {:.3e} (tolerance {:.0e}){}", e.rel_l2, e.max_abs, tol,
                     e.bad ? ", with NaN or misplaced infinities" : ""));
    CHECK(!e.bad);
    CHECK(e.rel_l2 <= tol);
    INFO("a write outside the output's view");
    CHECK(fence);
  }
  return {true, {}};
}

// The op's element types among f32 and bf16 (its dtype axis).
std::vector<std::string> dtypes_of(const OpInfo& info) {
  std::vector<std::string> out;
  for (const OpAxisInfo& a : info.axes)
    if (a.name == "dtype")
      for (const char* d : {"f32", "bf16"})
        if (a.domain.find(d) != std::string::npos) out.push_back(d);
  if (out.empty()) out.push_back("f32");
  return out;
}

void check_op(cli::OpCase& oc) {
  const std::string op = oc.op();
  const OpInfo info = describe_op(op);
  cli::ProblemParser parser(oc);
  int runs = 0, refusals = 0;
  for (const std::string& line : problem_lines(op))
    for (const std::string& dtype : dtypes_of(info)) {
      const std::string problem = line + " --dtype " + dtype;
      INFO("ejk run " << op << " " << problem);
      std::vector<std::string> words;
      std::istringstream split(problem);
      for (std::string w; split >> w;) words.push_back(w);
      auto o = parser.parse(words);
      Device host{};
      std::string fallback;
      cli::HostCase c;
      try {
        c = cli::make_case(oc, *o, Backend::cpu, host, fallback);  // a backward's case runs its forward
      } catch (const CompileError& e) {
        if (cpu_jit_available()) throw;
        UNSCOPED_INFO("not built in, and no CPU JIT here: " << e.what());
        continue;
      }
      const std::vector<ReferenceOutput> ref = reference(op, c.args());
      const double tol = cli::tolerance(op, c.dtype);
      for (Device device : devices(info)) {
        INFO("on " << to_string(device));
        for (Placement pl : {Placement::contiguous, Placement::padded, Placement::shuffled}) {
          INFO("placement " << placement_name(pl));
          try {
            const Outcome out = run_placed(op, info, c, device, pl, ref, tol);
            runs += out.ran;
            if (!out.ran) {
              ++refusals;
              UNSCOPED_INFO("refused: " << out.refused);
              const bool names_tensor = std::any_of(info.tensors.begin(), info.tensors.end(), [&](const OpTensorInfo& t) {
                return out.refused.find(t.name) != std::string::npos;
              });
              CHECK(names_tensor);
            }
          } catch (const CompileError& e) {
            if (device.kind != DeviceKind::cpu || cpu_jit_available()) throw;
            UNSCOPED_INFO("not built in, and no CPU JIT here: " << e.what());
          } catch (const InvalidArgument& e) {
            // A GPU backend whose spec domains do not take this problem (an f32 the CUDA
            // kernels do not have): the CPU must take every problem.
            if (device.kind == DeviceKind::cpu || pl != Placement::contiguous) throw;
            UNSCOPED_INFO("the CUDA kernels do not take this problem: " << e.what());
            break;
          }
        }
      }
    }
  CHECK(runs > 0);
  WARN(fmt::format("{}: {} checked runs, {} shuffled placements refused", op, runs, refusals));
}

}  // namespace

TEST_CASE("every op matches its float64 reference in every placement on every backend here") {
  for (cli::OpCase* oc : cli::op_cases()) {
    SECTION(oc->op()) { check_op(*oc); }
  }
}
