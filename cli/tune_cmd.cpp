// ejk tune OP ...: time the problem with the spec heuristic's key and with each of the backend's
// candidate configs (the spec's `configs`; else every combination of the listed values of the op's
// tuning axes) that its kernels take for the problem, and record the
// fastest in the tuning store, which later plans for this device and problem class use instead
// of the heuristic. The heuristic's key is a candidate, so a recorded winner was never measured
// slower than it. ejk tune ls|clear|export|import manage the store.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "commands.h"
#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "parse.h"
#include "run_cmd.h"

namespace ejk::cli {
namespace {

using Candidate = std::vector<std::pair<std::string, int64_t>>;

// The backend's candidate configs as its spec lists them; without a list, every combination of
// the spec's listed values of the op's int tuning axes.
std::vector<Candidate> candidates(const OpInfo& info, const std::string& backend) {
  std::vector<Candidate> out;
  if (auto it = info.configs.find(backend); it != info.configs.end() && !it->second.empty()) {
    for (const auto& config : it->second) out.emplace_back(config.begin(), config.end());
    return out;
  }
  out.push_back({});
  for (const OpAxisInfo& a : info.axes) {
    if (a.kind != "int" || !a.tuning || a.values.empty()) continue;  // a JIT range is not enumerated
    std::vector<Candidate> grown;
    for (const auto& c : out)
      for (int64_t v : a.values) {
        grown.push_back(c);
        grown.back().emplace_back(a.name, v);
      }
    out = std::move(grown);
  }
  return out;
}

struct Measured {
  std::string key;
  double ms = 0;
};

void tune_op(OpCase& oc, const RunOptions& o) {
  for (const auto& [name, value] : o.tuning)
    if (!value.empty()) {
      std::string axis = name;
      std::replace(axis.begin(), axis.end(), '_', '-');  // as the option is spelled
      throw InvalidArgument(fmt::format("ejk tune: --{} is what tuning chooses; give only the problem", axis));
    }
  ::setenv("EJK_TUNING", "0", 1);  // measure the heuristic itself, not an earlier winner
  const Backend backend = parse_backend(o.backend);
  const int iters = int(parse_int(o.iters, "--iters", 1, 1000000));
  Device device;
  std::string fallback;
  const HostCase c = make_case(oc, o, backend, device, fallback);
  DeviceProblem p = on_device(oc.op(), c, device, {});
  const Backend here = device.kind == DeviceKind::cpu ? Backend::cpu : Backend::cuda;
  const Context ctx{here};

  const Timing heuristic = time_calls(oc.op(), p.args, device, iters);
  std::vector<Measured> measured{{heuristic.info.key, heuristic.ms}};
  std::set<std::string> seen{heuristic.info.key};
  for (const Candidate& combo : candidates(describe_op(oc.op()), std::string(backend_name(here)))) {
    Args a = p.args;
    for (const auto& [axis, v] : combo) a.tune(axis, v);
    std::string key;
    try {
      key = variant_key(oc.op(), a, ctx);
    } catch (const InvalidArgument&) {
      continue;  // a combination the kernels do not take
    }
    if (!seen.insert(key).second) continue;
    try {
      measured.push_back({key, time_calls(oc.op(), a, device, iters).ms});
    } catch (const Error& e) {  // a compile that fails, or no JIT for a key that is not built in
      std::cerr << fmt::format("note: {} skipped: {}\n", key, e.what());
    }
  }
  const Measured* best = &measured.front();
  for (const Measured& m : measured) best = m.ms < best->ms ? &m : best;
  const auto path = tuning_record(oc.op(), p.args, best->key, best->ms, heuristic.ms, ctx);
  if (o.json) {
    nlohmann::json j{{"op", oc.op()}, {"heuristic", heuristic.info.key}, {"heuristic_ms", heuristic.ms},
                     {"best", best->key}, {"best_ms", best->ms}, {"record", path.string()}};
    for (const Measured& m : measured) j["candidates"][m.key] = m.ms;
    std::cout << j.dump() << "\n";
    return;
  }
  for (const Measured& m : measured)
    std::cout << fmt::format("  {:<72} {:10.4f} ms{}\n", m.key, m.ms, &m == best ? "  best" : "");
  std::cout << fmt::format("{}: {} candidates; best {} ({:.4f} ms, heuristic {:.4f} ms, {:.2f}x)\n  recorded in {}\n",
                           oc.op(), measured.size(), best->key, best->ms, heuristic.ms,
                           best->ms > 0 ? heuristic.ms / best->ms : 1.0, path.string());
  if (!fallback.empty()) std::cerr << "note: " << fallback << "\n";
}

void list_records(bool json) {
  const std::vector<TuningRecord> records = tuning_list();
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const TuningRecord& r : records)
      j.push_back({{"path", r.path.string()}, {"op", r.op}, {"device", r.device}, {"class", r.problem_class},
                   {"key", r.key}, {"ms", r.ms}, {"heuristic_ms", r.heuristic_ms}, {"problem", r.problem}});
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << fmt::format("tuning store {} ({} records)\n", tuning_root().string(), records.size());
  for (const TuningRecord& r : records) {
    if (!r.problem.empty()) {
      std::cout << fmt::format("  {}: not used: {}\n", r.path.filename().string(), r.problem);
      continue;
    }
    std::cout << fmt::format("  {}  {:.4f} ms (heuristic {:.4f} ms)\n    device {}\n    class {}\n", r.key, r.ms,
                             r.heuristic_ms, r.device, r.problem_class);
  }
}

std::string read_text(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InvalidArgument(fmt::format("tune import: cannot read {}", file));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InvalidArgument(fmt::format("tune export: cannot write {}", file));
}

}  // namespace

void add_tune_command(CLI::App& app) {
  CLI::App* tune = app.add_subcommand("tune", "Measure an op's tuning candidates for a problem and record the fastest; "
                                              "ls, clear, export, import the tuning store");
  tune->require_subcommand(1);
  for (OpCase* oc : op_cases()) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* cmd = tune->add_subcommand(oc->op(), fmt::format("Tune {} for the problem its options describe", oc->op()));
    add_case_options(cmd, *oc, o);
    cmd->callback([oc, o] { tune_op(*oc, *o); });
  }
  auto json = std::make_shared<bool>(false);
  tune->add_subcommand("ls", "List the tuning store's records")->callback([json] { list_records(*json); })
      ->add_flag("--json", *json, "Print a JSON array");
  tune->add_subcommand("clear", "Remove every tuning record")->callback([] {
    std::cout << fmt::format("removed {} tuning records from {}\n", tuning_clear(), tuning_root().string());
  });
  auto file = std::make_shared<std::string>();
  CLI::App* ex = tune->add_subcommand("export", "Write every usable record to one file (for another machine's import)");
  ex->add_option("file", *file, "The file to write")->required();
  ex->callback([file] { write_text(*file, tuning_export()); });
  auto in = std::make_shared<std::string>();
  CLI::App* im = tune->add_subcommand("import", "Store the records of an exported file (all are checked first)");
  im->add_option("file", *in, "A file written by ejk tune export")->required();
  im->callback([in] { std::cout << fmt::format("imported {} tuning records\n", tuning_import(read_text(*in))); });
}

}  // namespace ejk::cli
