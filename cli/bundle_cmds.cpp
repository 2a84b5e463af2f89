// ejk bundle build|ls|verify|extract: kernel bundles (.ejkb, ejk/bundle.h) from the command line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "ejk/bundle.h"

namespace ejk::cli {
namespace {

// Printable text only: names from a bundle come from a file anyone may have written.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// The compiler identity's first part ("Debian clang version 19.1.7", "nvrtc 13.0"): the rest
// (flags, features) is in --json.
std::string compiler_name(const std::string& identity) { return printable(identity.substr(0, identity.find(';'))); }

nlohmann::json to_json(const BundleInfo& b) {
  nlohmann::json entries = nlohmann::json::array();
  for (const BundleEntryInfo& e : b.entries) {
    nlohmann::json j{{"backend", e.backend}, {"key", e.key}, {"target", e.target}, {"arch", e.arch},
                     {"compiler", printable(e.compiler)}, {"content_hash", e.content_hash}, {"size", e.size},
                     {"stored_size", e.stored_size}, {"valid", e.valid}};
    j["problem"] = e.valid ? nlohmann::json() : nlohmann::json(printable(e.problem));
    j["current"] = e.current ? nlohmann::json(*e.current) : nlohmann::json();
    if (!e.extracted.empty()) j["extracted"] = e.extracted.string();
    entries.push_back(std::move(j));
  }
  nlohmann::json problems = nlohmann::json::array();
  for (const std::string& p : b.problems) problems.push_back(printable(p));
  return {{"path", b.path.string()}, {"format_version", b.format_version},
          {"generator_version", printable(b.generator_version)}, {"file_size", b.file_size},
          {"problems", problems}, {"entries", entries}, {"intact", b.intact()}};
}

// One line per entry; `verified` adds ok / stale / BAD.
void print_bundle(const BundleInfo& b, bool verified) {
  std::cout << fmt::format("bundle {}: format {}, generator {}, {} entries, {} bytes\n", b.path.string(),
                           b.format_version, printable(b.generator_version), b.entries.size(), b.file_size);
  for (const std::string& p : b.problems) std::cout << fmt::format("  DAMAGED: {}\n", printable(p));
  for (size_t i = 0; i < b.entries.size(); ++i) {
    const BundleEntryInfo& e = b.entries[i];
    if (e.key.empty()) {  // the record itself is unreadable
      std::cout << fmt::format("  BAD   entry {}: {}\n", i, printable(e.problem));
      continue;
    }
    std::string status;
    if (!e.valid) status = "BAD (" + printable(e.problem) + ")";
    else if (verified) status = e.current == std::optional<bool>(false) ? "ok, stale for this library" : "ok";
    std::cout << fmt::format("  {:<5} {:<56} {:<10} {:>9} B -> {:>8} B  {}  {}  {}\n", printable(e.backend),
                             printable(e.key), printable(e.arch), e.size, e.stored_size,
                             e.content_hash.substr(0, 16), compiler_name(e.compiler), status);
  }
  if (verified) {
    size_t good = 0;
    for (const BundleEntryInfo& e : b.entries) good += e.valid;
    std::cout << fmt::format("{} of {} entries valid{}\n", good, b.entries.size(),
                             b.problems.empty() ? "" : "; the file is damaged");
  }
}

void add_build(CLI::App& bundle) {
  auto req = std::make_shared<BundleBuildRequest>();
  CLI::App* c = bundle.add_subcommand("build", "Compile variants into a bundle (CUDA through NVRTC: no GPU needed)");
  c->add_option("--out", req->out, "The bundle file to write")->required();
  c->add_option("--variants", req->variants, "Regex searched in each key of the specs' AOT sets");
  c->add_option("--key", req->keys, "An exact variant key besides (repeatable), e.g. one outside the AOT sets");
  c->add_option("--backend", req->backend, "cpu or cuda")->capture_default_str();
  c->add_option("--arch", req->archs,
                "cpu: target levels (avx512,avx2,...; default this host's); cuda: device archs (sm_90a,sm_80,...)")
      ->delimiter(',');
  c->add_option("--jobs", req->jobs, "Parallel compiles (default and most: the bound from free memory and cores)")
      ->check(CLI::Range(1, 4096));
  c->callback([req] {
    BundleBuildRequest r = *req;
    r.progress = [](const BundleBuildProgress& p) {
      if (p.done == 0) {
        std::fprintf(stderr, "ejk bundle build: %zu variants, %d parallel compiles (%s)\n", p.total, p.jobs,
                     p.jobs_reason.c_str());
        return;
      }
      std::fprintf(stderr, "[%zu/%zu] %s %s %s %.1f s\n", p.done, p.total, p.key.c_str(), p.arch.c_str(),
                   p.source.c_str(), p.seconds);
    };
    const BundleBuildReport rep = build_bundle(r);
    std::cout << fmt::format("wrote {}: {} entries, {} bytes ({} bytes of binaries), in {:.1f} s with {} jobs\n",
                             r.out.string(), rep.entries, rep.stored_size, rep.size, rep.seconds, rep.jobs);
  });
}

void add_inspect(CLI::App& bundle, const std::string& name, bool verify) {
  struct State {
    std::string file;
    bool json = false;
  };
  auto st = std::make_shared<State>();
  CLI::App* c = bundle.add_subcommand(
      name, verify ? "Check every entry: checksums, decompression, payload (exit 1 on any damage)" : "List entries");
  c->add_option("file", st->file, "A bundle file (.ejkb)")->required();
  c->add_flag("--json", st->json, "Print one JSON object");
  c->callback([st, verify] {
    const BundleInfo b = inspect_bundle(st->file, verify);
    if (st->json) std::cout << to_json(b).dump() << "\n";
    else print_bundle(b, verify);
    if (verify && !b.intact()) set_exit_code(1);
  });
}

void add_extract(CLI::App& bundle) {
  struct State {
    std::string file, out;
  };
  auto st = std::make_shared<State>();
  CLI::App* c = bundle.add_subcommand("extract", "Write each intact entry as <key>.o or <key>.<arch>.cubin");
  c->add_option("file", st->file, "A bundle file (.ejkb)")->required();
  c->add_option("--out", st->out, "The directory to write into (created if missing)")->required();
  c->callback([st] {
    const BundleInfo b = extract_bundle(st->file, st->out);
    for (size_t i = 0; i < b.entries.size(); ++i) {
      const BundleEntryInfo& e = b.entries[i];
      if (e.valid) std::cout << e.extracted.string() << "\n";
      else std::cerr << fmt::format("ejk: entry {} ({}) not extracted: {}\n", i, printable(e.key), printable(e.problem));
    }
    if (!b.intact()) set_exit_code(1);
  });
}

}  // namespace

void add_bundle_command(CLI::App& app) {
  auto* bundle = app.add_subcommand("bundle", "Build, list, verify and extract kernel bundles (.ejkb)");
  bundle->require_subcommand(1);
  add_build(*bundle);
  add_inspect(*bundle, "ls", false);
  add_inspect(*bundle, "verify", true);
  add_extract(*bundle);
}

}  // namespace ejk::cli
