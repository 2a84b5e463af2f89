// What `ejk run` and `ejk tune` share (run_cmd.h) but timing: the case's options, making the
// problem, placing it on the device, comparing outputs with the reference. In the support
// library, so the op tests make their problems with the CLI's code.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include <unistd.h>

#include "ejk/core/error.h"
#include "op_case.h"
#include "parse.h"
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

// Inputs past a quarter of the host's memory are refused before any is made: the case's random
// fill, the outputs and the float64 reference of --check need several times their bytes.
void check_host_memory(const std::vector<InputSpec>& specs, const RunOptions& o) {
  double bytes = 0;
  for (const InputSpec& s : specs) {
    double n = double(dtype_size(s.dtype));
    for (int64_t d : s.shape) n *= double(d);
    bytes += n;
  }
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (memory > 0 && bytes > memory / 4)
    throw InvalidArgument(fmt::format("the problem's sizes ({}) are too large: its inputs take {:.1f} GiB, more than "
                                      "a quarter of this machine's {:.1f} GiB of memory",
                                      given_sizes(o), bytes / double(1 << 30), memory / double(1 << 30)));
}

}  // namespace

OutputError compare_output(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref) {
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

double tolerance(const std::string& op, DType dtype) {
  const std::map<std::string, double> tol = describe_op(op).tolerance;
  const auto it = tol.find(std::string(dtype_name(dtype)));
  return it != tol.end() ? it->second : 1e-5;
}

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
  check_host_memory(specs, o);
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

namespace {

// A case's options on a CLI11 subcommand, each value's text shown as its default.
class CliCaseOptions final : public CaseOptions {
 public:
  explicit CliCaseOptions(CLI::App& app) : app_(app) {}
  void add_option(const std::string& name, std::string& value, const std::string& doc) override {
    app_.add_option(name, value, doc)->capture_default_str();
  }
  void add_flag(const std::string& name, bool& value, const std::string& doc) override {
    app_.add_flag(name, value, doc);
  }

 private:
  CLI::App& app_;
};

}  // namespace

void add_case_options(CLI::App* cmd, OpCase& oc, const std::shared_ptr<RunOptions>& o) {
  CliCaseOptions options(*cmd);
  oc.add_options(options);
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
  const OpInfo info = describe_op(oc.op());  // kept: the loop must not walk a temporary's member
  for (const OpAxisInfo& a : info.axes)
    if (a.kind == "int" && a.tuning) {
      std::string flag = a.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      cmd->add_option("--" + flag, o->tuning[a.name], a.doc + " (default: the spec's heuristic)");
    }
  // A flag takes no value: CLI11 would read --causal=2 as true and --causal=no as false.
  for (CLI::Option* opt : cmd->get_options())
    if (opt->get_expected_max() == 0) opt->disable_flag_override();
}

std::shared_ptr<RunOptions> ProblemParser::parse(const std::vector<std::string>& words) {
  auto o = std::make_shared<RunOptions>();
  CLI::App app;
  add_case_options(&app, oc_, o);
  const bool first = defaults_.empty();
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_name() == "--help") continue;
    if (first) defaults_[opt->get_name()] = opt->get_expected_max() == 0 ? "false" : opt->get_default_str();
    opt->default_str(defaults_[opt->get_name()]);
    opt->force_callback();
  }
  std::vector<std::string> args(words.rbegin(), words.rend());  // CLI11 takes them last first
  app.parse(args);
  return o;
}

}  // namespace ejk::cli
