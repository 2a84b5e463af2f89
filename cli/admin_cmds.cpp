// ejk list, ejk cache ls|verify|clear, ejk compile OP: the same for every op; compile's options
// are the axes of the op's spec.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "commands.h"
#include "ejk/admin.h"
#include "ejk/op.h"
#include "parse.h"

namespace ejk::cli {
namespace {

int g_exit_code = 0;

// Printable text only: names from the cache come from files anyone may have written.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

void print_op(const OpListing& l, const std::set<std::string>& cached) {
  std::cout << fmt::format("{} (kernel family {}, spec {}; backends: {})\n", l.api, l.op, l.spec_file, fmt::join(l.backends, ", "));
  const std::vector<std::string> ops = op_names();
  if (std::find(ops.begin(), ops.end(), l.api) != ops.end()) {
    const OpInfo info = describe_op(l.api);
    for (const OpTensorInfo& t : info.tensors)
      std::cout << fmt::format("  {:<8} {:<16} {} {}{}\n", t.output ? "out" : t.optional ? "in (opt)" : "in", t.name,
                               t.layout, t.dtypes, t.mode_layouts.empty() ? "" : fmt::format("  varlen {}", t.mode_layouts[0].second));
    for (const OpScalarInfo& s : info.scalars)
      std::cout << fmt::format("  {:<8} {:<16} {} = {}\n", "scalar", s.name, s.type, s.default_value);
  } else {
    std::cout << "  (internal: a companion kernel other ops launch)\n";
  }
  std::cout << fmt::format("  built-in ({}):\n", l.builtin.size());
  for (const auto& k : l.builtin) std::cout << "    " << k << "\n";
  std::vector<std::string> mine;
  for (const auto& k : cached)
    if (k.rfind(l.op + ".", 0) == 0) mine.push_back(k);
  std::cout << fmt::format("  cached in {} ({}):\n", cache_root().string(), mine.size());
  for (const auto& k : mine) std::cout << "    " << printable(k) << "\n";
}

void print_list() {
  std::set<std::string> cached;
  for (const auto& e : cache_list(false)) cached.insert(e.key);
  for (const auto& op : list_ops()) print_op(op, cached);
}

void print_cache(bool verify) {
  auto entries = cache_list(verify);
  // Temp files and stray files are listed, but they are not entries and are not counted as such.
  const size_t n = size_t(std::count_if(entries.begin(), entries.end(), [](const auto& e) { return e.kind == "entry"; }));
  std::cout << fmt::format("cache {} ({} entries{})\n", cache_root().string(), n,
                           n == entries.size() ? "" : fmt::format(", {} other files", entries.size() - n));
  size_t bad_entries = 0, bad_others = 0;
  for (const auto& e : entries) {
    if (e.kind != "entry") {  // not an entry: say what it is and where, never load it
      std::cout << fmt::format("  {:<5} {:<72} ({}: {})\n", e.kind, printable(e.path.string()),
                               printable(e.problem), e.kind == "temp" ? "a writer's temp file" : "not an entry");
      if (e.kind != "temp") ++bad_others;
      continue;
    }
    std::cout << fmt::format("  {:<5} {:<72} {:>9} B  {}{}\n", printable(e.backend), printable(e.key), e.size,
                             verify ? (e.valid ? "ok" : "CORRUPT") : "", e.valid ? "" : " (" + printable(e.problem) + ")");
    if (!e.valid) ++bad_entries;
  }
  if (verify) {
    std::cout << fmt::format("{} of {} entries valid{}\n", n - bad_entries, n,
                             bad_others ? fmt::format("; {} files that are not entries", bad_others) : "");
    if (bad_entries + bad_others) g_exit_code = 1;
  }
}

std::string flag_name(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

// `ejk compile OP`: one option per axis of the op's spec (`--head-dim 128`, also `--d 128` by the
// axis's key prefix; flags as flags; enums by value).
void add_compile_subcommand(CLI::App& compile, const OpListing& l) {
  struct State {
    CompileRequest req;
    std::map<std::string, std::string> values;
    std::map<std::string, bool> flags;
    std::string arch;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  st->req.api = l.api;
  CLI::App* c = compile.add_subcommand(l.api, "Compile a variant of " + l.api + " into the cache without running it");
  c->add_option("--backend", st->req.backend, fmt::format("{}", fmt::join(l.backends, " or ")))->capture_default_str();
  c->add_option("--arch,--target", st->arch, "Target: sm80, sm90a (cuda); the host's (cpu)");
  c->add_flag("--json", st->json, "Print one JSON object");
  const std::vector<std::string> ops = op_names();
  const bool public_op = std::find(ops.begin(), ops.end(), l.api) != ops.end();
  std::map<std::string, std::string> prefixes = {{"head_dim", "d"}};
  const std::vector<OpAxisInfo> axes = public_op ? describe_op(l.api).axes : std::vector<OpAxisInfo>{};
  for (const OpAxisInfo& a : axes) {
    if (a.kind == "flag") {
      c->add_flag(flag_name(a.name), st->flags[a.name], a.doc.empty() ? "the key's " + a.name + " flag" : a.doc);
      continue;
    }
    std::string names = flag_name(a.name);
    if (auto p = prefixes.find(a.name); p != prefixes.end()) names += ",--" + p->second;
    c->add_option(names, st->values[a.name], fmt::format("{} ({}){}", a.doc, a.domain,
                                                         a.tuning ? "; default: the spec's heuristic" : ""));
  }
  c->callback([st] {
    CompileRequest r = st->req;
    r.target = st->arch;
    if (r.target.rfind("sm_", 0) == 0) r.target.erase(2, 1);  // sm_90a -> sm90a
    for (const auto& [name, v] : st->values)
      if (!v.empty()) r.axes[name] = v;
    for (const auto& [name, on] : st->flags)
      if (on) r.axes[name] = "1";
    const CompileReport rep = compile_variant(r);
    if (st->json) {
      nlohmann::json j{{"key", rep.key}, {"arch", rep.target}, {"source", rep.source}, {"compile_ms", rep.compile_ms},
                       {"cache_path", rep.cache_path.string()},
                       {"registers", rep.registers < 0 ? nlohmann::json() : nlohmann::json(rep.registers)},
                       {"shared_bytes", rep.shared_bytes < 0 ? nlohmann::json() : nlohmann::json(rep.shared_bytes)}};
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fmt::format("{}  [{}] {:.1f} ms  {}\n", rep.key, rep.source, rep.compile_ms, rep.cache_path.string());
    }
  });
}

}  // namespace

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

void add_list_command(CLI::App& app) {
  app.add_subcommand("list", "List ops, their arguments and variants: built-in and cached")->callback(print_list);
}

void add_cache_command(CLI::App& app) {
  auto* cache = app.add_subcommand("cache", "Inspect or clear the compiled-variant cache");
  cache->require_subcommand(1);
  cache->add_subcommand("ls", "List entries")->callback([] { print_cache(false); });
  cache->add_subcommand("verify", "Check every entry (exit 1 if any is bad)")->callback([] { print_cache(true); });
  cache->add_subcommand("clear", "Remove every entry")->callback([] {
    const size_t n = cache_clear();
    std::cout << fmt::format("removed {} entries from {}\n", n, cache_root().string());
  });
}

void add_compile_command(CLI::App& app) {
  auto* compile = app.add_subcommand("compile", "Compile a variant into the cache without running it");
  compile->require_subcommand(1);
  for (const OpListing& l : list_ops()) add_compile_subcommand(*compile, l);
}

}  // namespace ejk::cli
