// ejk-gen: the ahead-of-time generator.
//
//   ejk-gen --out DIR [--backends cpu,cuda] [--variants REGEX | --keys K1,K2] [--targets cuda=sm80,sm90a]
//           [--only all|sources|registry] [--registry library|user] [--cuda-cubins DIR] [--api-out DIR]
//           [--list-outputs | --cmake-manifest F]
//   ejk-gen list [--backends ...] [--variants REGEX]      the selected AOT keys, one per line
//   ejk-gen render KEY                                     the source of any valid key
//
// --specs, --templates and --kernels default to specs/, templates/ and kernels/ of the current
// directory (the repository root).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "ejk/core/error.h"
#include "files.h"
#include "generate.h"
#include "version.h"

namespace {

using namespace ejk::gen;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "--targets cuda=sm80,sm90a" (repeatable) -> {cuda: {sm80, sm90a}}.
std::map<std::string, std::set<std::string>> parse_targets(const std::vector<std::string>& specs) {
  std::map<std::string, std::set<std::string>> out;
  for (const std::string& s : specs) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ejk::InvalidArgument(fmt::format("--targets '{}': expected BACKEND=T1,T2", s));
    for (const std::string& t : split_list(s.substr(eq + 1))) out[s.substr(0, eq)].insert(t);
  }
  return out;
}

Registry parse_registry(const std::string& s) {
  if (s == "library") return Registry::library;
  if (s == "user") return Registry::user;
  throw ejk::InvalidArgument(fmt::format("--registry '{}': expected library or user", s));
}

Only parse_only(const std::string& s) {
  if (s == "all") return Only::all;
  if (s == "sources") return Only::sources;
  if (s == "registry") return Only::registry;
  throw ejk::InvalidArgument(fmt::format("--only '{}': expected all, sources or registry", s));
}

struct Args {
  std::string specs = "specs", templates = "templates", kernels = "kernels", out;
  std::string backends, variants, only = "all", registry = "library", cuda_cubins, cmake_manifest, api_out;
  std::vector<std::string> targets, keys;
  bool list_outputs = false;
  std::string key;
};

GenerateOptions options_from(const Args& a, const std::string& default_backends) {
  GenerateOptions o;
  o.specs_dir = a.specs;
  o.templates_dir = a.templates;
  o.kernels_dir = a.kernels;
  o.out_dir = a.out;
  o.selection.variants = a.variants;
  o.selection.keys = a.keys;
  o.selection.backends = split_list(a.backends.empty() ? default_backends : a.backends);
  o.selection.targets = parse_targets(a.targets);
  if (!a.cuda_cubins.empty()) o.cuda_cubins = a.cuda_cubins;
  if (!a.api_out.empty()) o.api_dir = a.api_out;
  o.only = parse_only(a.only);
  o.registry = parse_registry(a.registry);
  return o;
}

// Every backend any spec defines, for `list` without --backends.
std::string all_backends(const std::string& specs_dir) {
  std::set<std::string> names;
  for (const SpecFile& s : load_specs(specs_dir))
    for (const ejk::BackendDef& b : s.schema.backends()) names.insert(b.name);
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

int run_generate(const Args& a) {
  if (a.out.empty()) throw ejk::InvalidArgument("--out is required: the directory to generate into");
  const GenerateOptions o = options_from(a, "cpu");
  if (!a.cmake_manifest.empty()) {
    write_if_changed(a.cmake_manifest, cmake_manifest(o));
    return 0;
  }
  if (a.list_outputs) {
    for (const fs::path& p : list_outputs(o)) std::cout << p.string() << '\n';
    return 0;
  }
  const GenerateResult r = generate(o);
  std::cerr << fmt::format("ejk-gen: {} outputs in {}, {} written, {} stale removed\n", r.outputs.size(),
                           a.out, r.written, r.pruned);
  return 0;
}

int run_list(const Args& a) {
  Args with_out = a;
  with_out.out = "out";  // paths are not printed; plan_variants only needs some directory
  const GenerateOptions o = options_from(with_out, all_backends(a.specs));
  for (const PlannedVariant& v : plan_variants(load_specs(o.specs_dir), o.selection, o.out_dir))
    std::cout << v.name << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{fmt::format("ejk-gen {}: renders ejkernel's ahead-of-time variants and registry", kVersion)};
  app.require_subcommand(0, 1);
  app.fallthrough();
  Args a;
  app.add_option("--specs", a.specs, "directory of op specs (*.yaml)")->capture_default_str();
  app.add_option("--templates", a.templates, "directory of templates")->capture_default_str();
  app.add_option("--kernels", a.kernels, "kernel include root, embedded into the registry")->capture_default_str();
  app.add_option("--backends", a.backends, "comma-separated backends (generate: cpu; list: all)");
  app.add_option("--variants", a.variants, "regex searched in each canonical key; only matches are kept");
  app.add_option("--keys", a.keys, "exact keys to generate instead of the AOT sets (comma-separated)")
      ->delimiter(',');
  app.add_option("--targets", a.targets, "BACKEND=T1,T2: keep only these targets of BACKEND (repeatable)");
  app.add_option("--out", a.out, "output directory");
  app.add_option("--only", a.only, "what to write: all, sources or registry")->capture_default_str();
  app.add_option("--registry", a.registry,
                 "library: registry.cpp for libejk; user: registration.cpp, a program's own CPU variants")
      ->capture_default_str();
  app.add_option("--cuda-cubins", a.cuda_cubins, "directory of <key>.cubin files to embed in the CUDA table");
  app.add_option("--api-out", a.api_out, "also write the public ops' typed C++ and C APIs under this directory");
  app.add_flag("--list-outputs", a.list_outputs, "print the output paths, one per line, and write nothing");
  app.add_option("--cmake-manifest", a.cmake_manifest, "write the CMake manifest of the outputs to this file, and nothing else");
  CLI::App* list = app.add_subcommand("list", "print the selected AOT keys, one per line");
  CLI::App* render = app.add_subcommand("render", "print the rendered source of a key");
  render->add_option("key", a.key, "canonical variant key")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (list->parsed()) return run_list(a);
    if (render->parsed()) {
      std::cout << render_key(load_specs(a.specs), a.templates, a.key);
      return 0;
    }
    return run_generate(a);
  } catch (const std::exception& e) {
    std::cerr << "ejk-gen: error: " << e.what() << '\n';
    return 1;
  }
}
