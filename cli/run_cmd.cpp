// ejk run OP: make (or --load) a problem, validate it before allocating, run it on the chosen
// backend, time it, check every output against the float64 reference, report (text or JSON).
// The same for every op; an op contributes its OpCase (op_case.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>

#include "commands.h"
#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"
#include "progress.h"
#include "run_cmd.h"

namespace ejk::cli {
namespace {

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

}  // namespace

Timing time_calls(const std::string& op, const Args& args, Device device, int iters) {
  Timing t;
  {
    CompileProgress progress;
    t.info = run(op, args);  // the first call finds or compiles the variant
    synchronize(device);
  }
  std::vector<double> ms, host_us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    run(op, args);
    const auto t1 = Clock::now();
    synchronize(device);
    ms.push_back(ms_between(t0, Clock::now()));
    host_us.push_back(1e3 * ms_between(t0, t1));
  }
  auto median = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0.0 : v[v.size() / 2]; };
  t.ms = median(ms), t.host_us = median(host_us);
  return t;
}

namespace {

void report(const OpCase& oc, const HostCase& c, const RunInfo& info, double ms, double host_us,
            const std::vector<OutputError>& errors, bool pass, const std::string& fallback, bool json, int iters) {
  const Work w = oc.work(c);
  const double rate = ms > 0 ? (w.flops > 0 ? w.flops : w.bytes) / (ms * 1e6) : 0;
  const char* unit = w.flops > 0 ? "gflops" : "gbps";
  double worst_rel = 0, worst_abs = 0;
  for (const OutputError& e : errors) worst_rel = std::max(worst_rel, e.rel_l2), worst_abs = std::max(worst_abs, e.max_abs);
  const double tol = tolerance(oc.op(), c.dtype);
  if (json) {
    nlohmann::json j{{"op", oc.op()}, {"key", info.key}, {"backend", std::string(backend_name(info.backend))},
                     {"source", std::string(source_name(info.source))}, {"compile_ms", info.compile_ms},
                     {"load_ms", info.load_ms}, {"tuned", info.tuned}, {"ms", ms}, {"host_us", host_us}, {unit, rate}};
    j["check"] = errors.empty() ? nlohmann::json() : nlohmann::json(pass ? "pass" : "fail");
    j["rel_l2_err"] = errors.empty() ? nlohmann::json() : nlohmann::json(worst_rel);
    j["max_abs_err"] = errors.empty() ? nlohmann::json() : nlohmann::json(worst_abs);
    for (const OutputError& e : errors) j["outputs"][e.name] = {{"rel_l2", e.rel_l2}, {"max_abs", e.max_abs}, {"nonfinite_mismatch", e.bad}};
    if (!fallback.empty()) j["fallback_reason"] = fallback;
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << fmt::format("{}  [{} from {}{}]\n", info.key, backend_name(info.backend), source_name(info.source),
                           info.tuned ? ", tuned" : "");
  if (info.source == VariantSource::jit) std::cout << fmt::format("  compile {:.1f} ms\n", info.compile_ms);
  if (info.source == VariantSource::cache) std::cout << fmt::format("  cache load {:.2f} ms\n", info.load_ms);
  if (info.source == VariantSource::bundle) std::cout << fmt::format("  bundle load {:.2f} ms\n", info.load_ms);
  std::cout << fmt::format("  time {:.3f} ms (median of {}), host {:.1f} us per call  {:.1f} {}\n", ms, iters, host_us,
                           rate, w.flops > 0 ? "GFLOP/s" : "GB/s");
  for (const OutputError& e : errors)
    std::cout << fmt::format("  check {} vs float64: rel_l2 {:.3e}  max_abs {:.3e}{}  (tol {:.0e})\n", e.name, e.rel_l2,
                             e.max_abs, e.bad ? "  NaN/inf mismatch" : "", tol);
  if (!errors.empty()) std::cout << (pass ? "  PASS\n" : "  FAIL\n");
  if (!fallback.empty()) std::cerr << "note: " << fallback << "\n";
}

void run_op(OpCase& oc, const RunOptions& o) {
  const Backend backend = parse_backend(o.backend);
  const int iters = int(parse_int(o.iters, "--iters", 0, 1000000));
  Device device;
  std::string fallback;
  const HostCase c = make_case(oc, o, backend, device, fallback);
  DeviceProblem p = on_device(oc.op(), c, device, with_tuning({}, o));
  Args& args = p.args;
  auto& outputs = p.outputs;
  const Timing t = time_calls(oc.op(), args, device, iters);
  const RunInfo& info = t.info;
  std::vector<OutputError> errors;
  bool pass = true;
  if (o.check) {
    // Poison, run once more, then compare: every element must have been written.
    for (auto& [name, t] : outputs) {
      Tensor poison = Tensor::empty(t.shape(), t.dtype());
      std::memset(poison.data(), 0xff, poison.nbytes());
      t = device.kind == DeviceKind::cpu ? poison : poison.to(device);
      args.set(name, t.view());
    }
    run(oc.op(), args);
    synchronize(device);
    const std::vector<ReferenceOutput> ref = reference(oc.op(), c.args());
    const double tol = tolerance(oc.op(), c.dtype);
    for (auto& [name, t] : outputs) {
      t = t.to(Device{});
      auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
      errors.push_back(compare_output(name, to_double(t), r->values));
      pass = pass && !errors.back().bad && errors.back().rel_l2 <= tol;
    }
  }
  if (!o.save.empty()) {
    for (auto& [name, t] : outputs) t = t.to(Device{});
    save_case(c, outputs, o.save);
  }
  report(oc, c, info, t.ms, t.host_us, errors, pass, fallback, o.json, iters);
  if (!pass) set_exit_code(1);
}

}  // namespace

namespace {

void add_op_subcommand(CLI::App& run, OpCase& oc) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = run.add_subcommand(oc.op(), describe_op(oc.op()).doc);
  add_case_options(cmd, oc, o);
  cmd->callback([&oc, o] { run_op(oc, *o); });
}

}  // namespace

void add_run_command(CLI::App& app) {
  CLI::App* run = app.add_subcommand("run", "Run an op on random (or --load'ed) inputs, time it, check it");
  run->require_subcommand(1);
  for (OpCase* oc : op_cases()) add_op_subcommand(*run, *oc);
}

}  // namespace ejk::cli
