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

// The problem's size options as given, e.g. "--b 4 --sq 1024", for errors about the sizes.
std::string given_sizes(const RunOptions& o) {
  std::string out;
  for (const CLI::Option* opt : o.problem)
    if (opt->count() > 0) out += fmt::format("{}{} {}", out.empty() ? "" : " ", opt->get_name(), opt->as<std::string>());
  return out;
}

struct OutputError {
  std::string name;
  double rel_l2 = 0, max_abs = 0;
  bool bad = false;  // NaN, or infinities where the reference has none (or the reverse)
};

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

OutputError compare(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref) {
  OutputError e{name};
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double x = got[i], r = ref[i];
    if (std::isnan(x) || std::isinf(x) != std::isinf(r) || (std::isinf(r) && x != r)) {
      e.bad = true;
      continue;
    }
    if (std::isinf(r)) continue;
    num += (x - r) * (x - r);
    den += r * r;
    e.max_abs = std::max(e.max_abs, std::abs(x - r));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return e;
}

}  // namespace

Args with_tuning(Args a, const RunOptions& o) {
  for (const auto& [axis, text] : o.tuning) {
    if (text.empty()) continue;
    std::string flag = "--" + axis;  // as the option is spelled: --block-q for block_q
    std::replace(flag.begin(), flag.end(), '_', '-');
    a.tune(axis, parse_int(text, flag, 1, 1 << 20));
  }
  return a;
}

namespace {

// The inputs' shapes as views without memory: the op checks them before anything is made.
Args shape_args(const HostCase& c, const std::vector<InputSpec>& specs, Device device) {
  Args a;
  for (const InputSpec& s : specs) {
    try {
      a.set(s.name, TensorView{nullptr, s.dtype, device, s.shape, contiguous_strides(s.shape)});
    } catch (const InvalidArgument& e) {  // sizes whose product overflows: name the input
      throw InvalidArgument(fmt::format("{}: {}", s.name, e.what()));
    }
  }
  for (const auto& [name, v] : c.scalars) a.set(name, v);
  return a;
}

// --backend cuda needs a usable GPU whose kernels take the problem; auto takes one when it can
// and says why not otherwise.
Device pick_device(const std::string& op, Backend backend, const Args& shapes_on_cuda, std::string& fallback) {
  std::string why;
  switch (backend) {
    case Backend::cpu: return Device{};
    case Backend::cuda:
      if (!backend_available(Backend::cuda, &why)) throw BackendUnavailable("--backend cuda: " + why);
      return Device{DeviceKind::cuda, 0};
    case Backend::hip:
      backend_available(Backend::hip, &why);
      throw BackendUnavailable("--backend hip: " + why);
    case Backend::auto_:
      if (!backend_available(Backend::cuda, &why)) {
        fallback = "auto picked the CPU: CUDA unavailable (" + why + ")";
        return Device{};
      }
      try {
        variant_key(op, shapes_on_cuda, Context{Backend::cuda});
        return Device{DeviceKind::cuda, 0};
      } catch (const InvalidArgument& e) {
        fallback = std::string("auto picked the CPU: the CUDA kernels do not take this problem (") + e.what() + ")";
        return Device{};
      }
  }
  return Device{};
}

}  // namespace

HostCase make_case(OpCase& oc, const RunOptions& o, Backend backend, Device& device, std::string& fallback) {
  HostCase c;
  if (!o.load.empty()) {
    c = load_case(o.load, oc.op());
    oc.finish(c);
    std::vector<InputSpec> specs;
    for (const auto& [name, t] : c.inputs) specs.push_back({name, t.shape(), t.dtype()});
    device = pick_device(oc.op(), backend, with_tuning(shape_args(c, specs, {DeviceKind::cuda, 0}), o), fallback);
    return c;
  }
  c.op = oc.op();
  c.dtype = parse_dtype(o.dtype);
  c.seed = uint64_t(parse_int(o.seed, "--seed", 0, INT64_MAX));
  std::vector<InputSpec> specs;
  try {
    specs = oc.inputs(c.dtype);
    oc.scalars(c);
    device = pick_device(oc.op(), backend, with_tuning(shape_args(c, specs, {DeviceKind::cuda, 0}), o), fallback);
    variant_key(oc.op(), with_tuning(shape_args(c, specs, device), o), Context{});  // validates before allocating
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    if (what.find("overflow") == std::string::npos && what.find("spans more than") == std::string::npos) throw;
    throw InvalidArgument(fmt::format("the problem's sizes ({}) are too large: {}", given_sizes(o), what));
  }
  std::mt19937_64 rng(c.seed);
  for (const InputSpec& s : specs) {
    Tensor t = Tensor::empty(s.shape, s.dtype);
    oc.fill(s.name, t, rng);
    c.inputs.emplace_back(s.name, std::move(t));
  }
  oc.finish(c);
  return c;
}

DeviceProblem on_device(const std::string& op, const HostCase& c, Device device, const Args& tuning) {
  DeviceProblem p;
  p.args = tuning;
  for (const auto& [name, t] : c.inputs) {
    p.keep.push_back(device.kind == DeviceKind::cpu ? t : t.to(device));
    p.args.set(name, p.keep.back().view());
  }
  for (const auto& [name, v] : c.scalars) p.args.set(name, v);
  for (const OutputSpec& s : output_specs(op, p.args)) {
    p.outputs.emplace_back(s.name, Tensor::empty(s.shape, s.dtype, device));
    p.args.set(s.name, p.outputs.back().second.view());
  }
  return p;
}

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
  const double tol = c.dtype == DType::f32 ? 1e-5 : 1e-2;
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
    const double tol = c.dtype == DType::f32 ? 1e-5 : 1e-2;
    for (auto& [name, t] : outputs) {
      t = t.to(Device{});
      auto r = std::find_if(ref.begin(), ref.end(), [&](const ReferenceOutput& x) { return x.name == name; });
      errors.push_back(compare(name, to_double(t), r->values));
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

void add_case_options(CLI::App* cmd, OpCase& oc, const std::shared_ptr<RunOptions>& o) {
  oc.add_options(*cmd);
  for (const CLI::Option* opt : cmd->get_options())
    if (opt->get_expected_max() > 0) o->problem.push_back(opt);
  cmd->add_option("--dtype", o->dtype, "Element type (the op's dtype axis)")->capture_default_str();
  cmd->add_option("--backend", o->backend, "cpu, cuda, hip or auto (a GPU when one takes the problem)")->capture_default_str();
  cmd->add_option("--iters", o->iters, "Timed runs (median reported)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_flag("--check", o->check, "Compare every output with the float64 reference; exit 1 past tolerance");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--save", o->save, "Write inputs, outputs (.npy) and params.json to this folder");
  cmd->add_option("--load", o->load, "Read inputs and scalars from a folder written by --save");
  for (const OpAxisInfo& a : describe_op(oc.op()).axes)
    if (a.kind == "int" && a.tuning) {
      std::string flag = a.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      cmd->add_option("--" + flag, o->tuning[a.name], a.doc + " (default: the spec's heuristic)");
    }
  // A flag takes no value: CLI11 would read --causal=2 as true and --causal=no as false.
  for (CLI::Option* opt : cmd->get_options())
    if (opt->get_expected_max() == 0) opt->disable_flag_override();
}

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
