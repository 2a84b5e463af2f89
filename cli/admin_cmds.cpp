// ejk list, ejk cache ls|verify|clear, ejk compile.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <set>
#include <utility>

#include "commands.h"
#include "ejk/admin.h"

namespace ejk::cli {
namespace {

int g_exit_code = 0;

void print_list() {
  auto cached = cache_list(false);
  std::set<std::string> cached_keys;
  for (const auto& e : cached) cached_keys.insert(e.key);
  for (const auto& op : list_ops()) {
    std::cout << fmt::format("{} (kernel family {}, spec {}; backends: {})\n", op.api, op.op, op.spec_file,
                             fmt::join(op.backends, ", "));
    std::cout << fmt::format("  built-in ({}):\n", op.builtin.size());
    for (const auto& k : op.builtin) std::cout << "    " << k << "\n";
    std::vector<std::string> mine;
    for (const auto& k : cached_keys)
      if (k.rfind(op.op + ".", 0) == 0) mine.push_back(k);
    std::cout << fmt::format("  cached in {} ({}):\n", cache_root().string(), mine.size());
    for (const auto& k : mine) std::cout << "    " << k << "\n";
  }
}

void print_cache(bool verify) {
  auto entries = cache_list(verify);
  std::cout << fmt::format("cache {} ({} entries)\n", cache_root().string(), entries.size());
  size_t bad = 0;
  for (const auto& e : entries) {
    std::cout << fmt::format("  {:<5} {:<72} {:>9} B  {}{}\n", e.backend, e.key, e.size,
                             verify ? (e.valid ? "ok" : "CORRUPT") : "", e.valid ? "" : " (" + e.problem + ")");
    if (!e.valid) ++bad;
  }
  if (verify) {
    std::cout << fmt::format("{} of {} entries valid\n", entries.size() - bad, entries.size());
    if (bad) g_exit_code = 1;
  }
}

}  // namespace

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

void add_list_command(CLI::App& app) {
  auto* list = app.add_subcommand("list", "List ops and their variants: built-in and cached");
  list->callback(print_list);
}

void add_cache_command(CLI::App& app) {
  auto* cache = app.add_subcommand("cache", "Inspect or clear the compiled-variant cache");
  cache->require_subcommand(1);
  cache->add_subcommand("ls", "List entries")->callback([] { print_cache(false); });
  cache->add_subcommand("verify", "Check every entry's header and checksum (exit 1 if any is bad)")
      ->callback([] { print_cache(true); });
  cache->add_subcommand("clear", "Remove every entry")->callback([] {
    size_t n = cache_clear();
    std::cout << fmt::format("removed {} entries from {}\n", n, cache_root().string());
  });
}

void add_compile_command(CLI::App& app) {
  auto req = std::make_shared<CompileRequest>();
  auto flags = std::make_shared<std::map<std::string, bool>>();
  auto ints = std::make_shared<std::map<std::string, int64_t>>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto json = std::make_shared<bool>(false);
  auto arch = std::make_shared<std::string>();
  auto* c = app.add_subcommand("compile", "Compile a variant into the cache without running it");
  c->add_option("op", req->api, "Op")->check(CLI::IsMember({"flash_attention"}))->required();
  c->add_option("--backend", req->backend, "cpu or cuda")->capture_default_str();
  c->add_option("--arch,--target", *arch, "Target: sm80, sm90a (cuda); avx512, avx2, generic (cpu)");
  c->add_option("--dtype", *dtype, "f32, bf16 or f16")->capture_default_str();
  const std::pair<const char*, const char*> int_axes[] = {
      {"d", "Head dim"},
      {"block-q", "Query block (default: the spec's heuristic)"},
      {"block-k", "Key block (default: the spec's heuristic)"}};
  for (const auto& [n, help] : int_axes) c->add_option(std::string("--") + n, (*ints)[n], help);
  for (const char* n : {"causal", "window", "segments", "softcap", "sinks", "bias"})
    c->add_flag(std::string("--") + n, (*flags)[n], std::string("The key's ") + n + " flag");
  c->add_flag("--per-item", (*flags)["per_item"],
              "sm90a: one block per work item instead of persistent blocks (a tuning flag)");
  c->add_flag("--json", *json, "Print one JSON object");
  c->callback([=] {
    CompileRequest r = *req;
    r.target = *arch;
    if (r.target.rfind("sm_", 0) == 0) r.target.erase(2, 1);  // sm_90a → sm90a
    r.axes["dtype"] = *dtype;
    if ((*ints)["d"]) r.axes["head_dim"] = std::to_string((*ints)["d"]);
    if ((*ints)["block-q"]) r.axes["block_q"] = std::to_string((*ints)["block-q"]);
    if ((*ints)["block-k"]) r.axes["block_k"] = std::to_string((*ints)["block-k"]);
    for (const auto& [name, on] : *flags) r.axes[name] = on ? "1" : "0";
    CompileReport rep = compile_variant(r);
    if (*json) {
      nlohmann::json j{{"key", rep.key}, {"arch", rep.target}, {"source", rep.source},
                       {"compile_ms", rep.compile_ms}, {"cache_path", rep.cache_path.string()},
                       {"registers", rep.registers < 0 ? nlohmann::json() : nlohmann::json(rep.registers)},
                       {"shared_bytes", rep.shared_bytes < 0 ? nlohmann::json() : nlohmann::json(rep.shared_bytes)}};
      std::cout << j.dump() << "\n";
    } else {
      std::cout << fmt::format("{}  [{}] {:.1f} ms  {}\n", rep.key, rep.source, rep.compile_ms, rep.cache_path.string());
    }
  });
}

}  // namespace ejk::cli
