// One `backends.<name>` section of a spec: targets, domains, constraints, configs, heuristic
// and AOT sets. Expressions are checked here against the names their context defines.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "schema_internal.h"

namespace ejk::detail {
namespace {

std::string join_set(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += fmt::format("{}{}", s.empty() ? "" : ", ", n);
  return s;
}

AxisDef* find_axis(std::vector<AxisDef>& axes, std::string_view name) {
  for (AxisDef& a : axes)
    if (a.name == name) return &a;
  return nullptr;
}

TargetDef parse_target(const SpecReader& r, const YAML::Node& n, const std::string& name,
                       const std::string& path) {
  Fields f = r.fields(n, path, {"flags", "requires", "vars", "doc"}, {"flags"});
  TargetDef t;
  t.name = name;
  t.line = f.line;
  t.compile_flags = r.scalar_list(*f.find("flags"), SpecReader::join(path, "flags"), true);
  if (const YAML::Node* q = f.find("requires"))
    t.requires_features = r.scalar_list(*q, SpecReader::join(path, "requires"), true);
  if (const YAML::Node* v = f.find("vars")) {
    Fields vf = r.open_fields(*v, SpecReader::join(path, "vars"));
    for (const auto& [var, value] : vf.entries()) {
      const std::string vpath = SpecReader::join(SpecReader::join(path, "vars"), var);
      if (!is_identifier(var)) r.fail(value, vpath, "expected a name [a-z_][a-z0-9_]*");
      t.vars[var] = r.integer(value, vpath);
    }
  }
  if (const YAML::Node* d = f.find("doc")) t.doc = r.text(*d, SpecReader::join(path, "doc"));
  return t;
}

// `targets: [a, b]`: entries of the shared table (specs/targets.yaml), in this order.
std::vector<TargetDef> named_targets(const SpecReader& r, const YAML::Node& n, const std::string& path,
                                     const std::string& backend, const TargetTable* table) {
  if (!table) r.fail(n, path, "names targets of specs/targets.yaml, but no target table was given");
  auto b = table->backends.find(backend);
  if (b == table->backends.end()) r.fail(n, path, fmt::format("specs/targets.yaml has no backend '{}'", backend));
  std::string known;
  for (const TargetDef& t : b->second) known += fmt::format("{}{}", known.empty() ? "" : ", ", t.name);
  const std::vector<YAML::Node> items = r.list(n, path, false);
  std::vector<TargetDef> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string ipath = SpecReader::index(path, i);
    const std::string name = r.token(items[i], ipath);
    auto t = std::find_if(b->second.begin(), b->second.end(), [&](const TargetDef& x) { return x.name == name; });
    if (t == b->second.end())
      r.fail(items[i], ipath, fmt::format("'{}' is not a {} target of specs/targets.yaml ({})", name, backend, known));
    if (std::any_of(out.begin(), out.end(), [&](const TargetDef& x) { return x.name == name; }))
      r.fail(items[i], ipath, fmt::format("'{}' is listed twice", name));
    out.push_back(*t);
    out.back().line = SpecReader::line(items[i]);  // messages point into the spec that names it
  }
  return out;
}

// What a target's `requires` may name: CPU features the runtime can test on the host, CUDA
// compute capabilities sm_XY (X.Y or later) and sm_XYa (exactly X.Y). Checked here so a typo
// fails the spec, not a user's first call.
void check_requirements(const SpecReader& r, const std::string& backend, const TargetDef& t, const std::string& path) {
  static const std::set<std::string> kCpuFeatures = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16",
                                                     "amx-tile", "amx-bf16", "avx2", "fma", "f16c", "sse4.2"};
  auto is_arch = [](const std::string& f) {
    std::string_view v = f;
    if (!v.starts_with("sm_")) return false;
    v.remove_prefix(3);
    if (v.ends_with('a')) v.remove_suffix(1);
    return v.size() >= 2 && v.size() <= 3 && v.front() != '0' &&
           std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const std::string& f : t.requires_features) {
    const bool ok = backend == "cpu" ? kCpuFeatures.count(f) > 0 : backend == "cuda" ? is_arch(f) : true;
    if (!ok)
      r.fail(t.line, SpecReader::join(path, "requires"),
             backend == "cpu" ? fmt::format("unknown CPU feature '{}' (known: {})", f, join_set(kCpuFeatures))
                              : fmt::format("'{}' is not a compute capability (sm_80, sm_90a, ...)", f));
  }
  for (const std::string& flag : t.compile_flags)
    if (flag.empty() || flag.find('\0') != std::string::npos)
      r.fail(t.line, SpecReader::join(path, "flags"), "a flag is empty or holds a NUL byte");
}

// Targets in preference order (the runtime takes the first one the host supports): a map
// declaring them, or a list naming the shared table's.
std::vector<TargetDef> parse_targets(const SpecReader& r, const YAML::Node& n,
                                     const std::string& path, const std::string& backend,
                                     const TargetTable* table) {
  if (n.IsSequence()) return named_targets(r, n, path, backend, table);
  Fields f = r.open_fields(n, path);
  if (f.entries().empty()) r.fail(f.line, path, "expected at least one target");
  std::vector<TargetDef> out;
  for (const auto& [name, node] : f.entries()) {
    const std::string tpath = SpecReader::join(path, name);
    if (!is_token(name)) r.fail(node, tpath, "a target name must be a token [a-z0-9]+");
    out.push_back(parse_target(r, node, name, tpath));
    // Expressions of the backend are checked once for all targets, so all define the same vars.
    std::set<std::string> first, here;
    for (const auto& [k, v] : out.front().vars) first.insert(k);
    for (const auto& [k, v] : out.back().vars) here.insert(k);
    if (first != here)
      r.fail(out.back().line, SpecReader::join(tpath, "vars"),
             fmt::format("defines {{{}}} but target '{}' defines {{{}}}: every target of a "
                         "backend must define the same vars",
                         join_set(here), out.front().name, join_set(first)));
  }
  return out;
}

void apply_domains(const SpecReader& r, const YAML::Node& n, const std::string& path,
                   std::vector<AxisDef>& axes) {
  Fields f = r.open_fields(n, path);
  for (const auto& [name, node] : f.entries()) {
    const std::string dpath = SpecReader::join(path, name);
    AxisDef* a = find_axis(axes, name);
    if (!a) r.fail(node, dpath, "unknown axis");
    if (a->kind == AxisKind::Flag) r.fail(node, dpath, "a flag axis has no domain to narrow");
    Fields df = r.fields(node, dpath, {"values", "jit"}, {"values"});
    AxisDef narrowed = *a;
    parse_domain(r, df, dpath, narrowed);
    // Enum values keep their op-wide positions in expressions, so a backend may only narrow.
    for (const std::string& v : narrowed.enum_values)
      if (std::find(a->enum_values.begin(), a->enum_values.end(), v) == a->enum_values.end())
        r.fail(df.line, SpecReader::join(dpath, "values"),
               fmt::format("'{}' is not a value of axis '{}'", v, a->name));
    narrowed.line = df.line;
    *a = std::move(narrowed);
  }
}

void check_expr(const SpecReader& r, int line, const std::string& path, const std::string& expr,
                const std::set<std::string>& known) {
  const std::string where = fmt::format("{}:{}: {}", r.file(), line, path);
  // '/' or '%' directly before a literal 0 divides by zero for every problem: a spec error now,
  // not an error at a user's first call that reaches the expression.
  for (size_t i = 0; i < expr.size(); ++i) {
    if (expr[i] != '/' && expr[i] != '%') continue;
    size_t j = i + 1;
    while (j < expr.size() && expr[j] == ' ') ++j;
    const size_t digits = j;
    while (j < expr.size() && expr[j] == '0') ++j;
    const bool ident = j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_');
    if (j > digits && !ident)
      r.fail(line, path, fmt::format("'{}' divides by the constant 0", expr));
  }
  for (const std::string& id : expr_identifiers(expr, where))
    if (!known.count(id))
      r.fail(line, path, fmt::format("unknown identifier '{}' in '{}' (known: {})", id, expr,
                                     join_set(known)));
}

// A {int axis: value} map: a candidate config, or a heuristic's choice, which may also set
// tuning flags (`tuning_flags`: true / false, stored as 1 / 0).
std::map<std::string, int64_t> parse_choice(const SpecReader& r, const YAML::Node& n,
                                            const std::string& path,
                                            const std::vector<AxisDef>& axes, bool tuning_flags) {
  Fields f = r.open_fields(n, path);
  if (f.entries().empty()) r.fail(f.line, path, "expected at least one axis");
  std::map<std::string, int64_t> out;
  for (const auto& [name, node] : f.entries()) {
    const std::string cpath = SpecReader::join(path, name);
    const AxisDef* a = nullptr;
    for (const AxisDef& x : axes) a = x.name == name ? &x : a;
    if (tuning_flags && a && a->kind == AxisKind::Flag && a->tuning) {
      out[name] = r.boolean(node, cpath) ? 1 : 0;
      continue;
    }
    if (!a || a->kind != AxisKind::Int)
      r.fail(node, cpath, tuning_flags ? "not an int axis or a tuning flag" : "not an int axis");
    const int64_t v = r.integer(node, cpath);
    if (!int_in_domain(*a, v))
      r.fail(node, cpath, fmt::format("{} is outside the domain ({})", v, describe_domain(*a)));
    out[name] = v;
  }
  return out;
}

// The int axes of a choice: what must match one of the backend's configs.
std::map<std::string, int64_t> block_part(std::map<std::string, int64_t> choice,
                                          const std::vector<AxisDef>& axes) {
  for (const AxisDef& a : axes)
    if (a.kind == AxisKind::Flag) choice.erase(a.name);
  return choice;
}

std::vector<HeuristicRule> parse_heuristic(const SpecReader& r, const YAML::Node& n,
                                           const std::string& path, const BackendDef& b,
                                           const std::set<std::string>& known) {
  std::vector<HeuristicRule> out;
  const std::vector<YAML::Node> items = r.list(n, path, false);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string rpath = SpecReader::index(path, i);
    Fields f = r.fields(items[i], rpath, {"when", "choose"}, {"choose"});
    HeuristicRule rule;
    rule.line = f.line;
    rule.when = f.has("when") ? r.scalar(*f.find("when"), SpecReader::join(rpath, "when")) : "true";
    check_expr(r, rule.line, SpecReader::join(rpath, "when"), rule.when, known);
    rule.choose = parse_choice(r, *f.find("choose"), SpecReader::join(rpath, "choose"), b.axes, true);
    if (!b.configs.empty() && std::find(b.configs.begin(), b.configs.end(),
                                        block_part(rule.choose, b.axes)) == b.configs.end())
      r.fail(rule.line, SpecReader::join(rpath, "choose"), "is not one of the backend's configs");
    if (!out.empty() && out.back().when == "true")
      r.fail(rule.line, rpath, "follows a rule without 'when', so it can never apply");
    out.push_back(std::move(rule));
  }
  if (out.back().when != "true")
    r.fail(out.back().line, SpecReader::index(path, out.size() - 1),
           "the last rule must have no 'when' (the default), so every problem gets a choice");
  return out;
}

// One AOT value, normalized to the spelling the key uses (decimal ints, true/false flags).
std::string aot_value(const SpecReader& r, const YAML::Node& n, const std::string& path,
                      const AxisDef& a) {
  if (a.kind == AxisKind::Flag) return r.boolean(n, path) ? "true" : "false";
  if (a.kind == AxisKind::Enum) {
    std::string v = r.token(n, path);
    if (std::find(a.enum_values.begin(), a.enum_values.end(), v) == a.enum_values.end())
      r.fail(n, path, fmt::format("'{}' is outside the domain of '{}' ({})", v, a.name, describe_domain(a)));
    return v;
  }
  const int64_t v = r.integer(n, path);
  if (std::find(a.int_values.begin(), a.int_values.end(), v) == a.int_values.end()) {
    AxisDef prebuilt = a;  // the JIT range does not count: AOT values must be listed
    prebuilt.jit_max = 0;
    r.fail(n, path, fmt::format("{} is not a pre-built value of '{}' (values: {})", v, a.name,
                                describe_domain(prebuilt)));
  }
  return std::to_string(v);
}

std::map<std::string, std::vector<std::string>> parse_aot_set(const SpecReader& r,
                                                              const YAML::Node& n,
                                                              const std::string& path,
                                                              const BackendDef& b) {
  Fields f = r.open_fields(n, path);
  std::map<std::string, std::vector<std::string>> set;
  for (const auto& [name, node] : f.entries()) {
    const std::string vpath = SpecReader::join(path, name);
    const AxisDef* a = nullptr;
    for (const AxisDef& x : b.axes) a = x.name == name ? &x : a;
    if (!a && name != "target") r.fail(node, vpath, "unknown axis (expected 'target' or an axis name)");
    const std::vector<YAML::Node> items = r.list(node, vpath, false);
    std::vector<std::string>& values = set[name];
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string ipath = SpecReader::index(vpath, i);
      std::string v = a ? aot_value(r, items[i], ipath, *a) : r.token(items[i], ipath);
      if (!a && !b.find_target(v))
        r.fail(items[i], ipath, fmt::format("'{}' is not a target of backend '{}'", v, b.name));
      if (std::find(values.begin(), values.end(), v) != values.end())
        r.fail(items[i], ipath, fmt::format("'{}' is listed twice", v));
      values.push_back(std::move(v));
    }
  }
  // Unnamed flags are off; every other axis must be spelled out, so a set never depends on
  // which value happens to come first in a domain.
  if (!set.count("target")) r.fail(f.line, SpecReader::join(path, "target"), "missing required key");
  for (const AxisDef& a : b.axes)
    if (a.kind != AxisKind::Flag && !set.count(a.name))
      r.fail(f.line, SpecReader::join(path, a.name), "missing required key (only flags default to off)");
  return set;
}

void check_names_distinct(const SpecReader& r, const BackendDef& b, const std::string& path,
                          const std::set<std::string>& taken) {
  for (const auto& [var, v] : b.targets.front().vars)
    if (taken.count(var))
      r.fail(b.targets.front().line, SpecReader::join(SpecReader::join(path, "targets"), b.targets.front().name),
             fmt::format("target var '{}' is also an axis, problem variable or enum value", var));
}

}  // namespace

bool int_in_domain(const AxisDef& a, int64_t v) {
  if (std::find(a.int_values.begin(), a.int_values.end(), v) != a.int_values.end()) return true;
  const bool has_jit = a.jit_max > 0;
  return has_jit && v >= a.jit_min && v <= a.jit_max && v % a.jit_multiple_of == 0;
}

std::string describe_domain(const AxisDef& a) {
  std::string s;
  if (a.kind == AxisKind::Enum)
    for (const auto& v : a.enum_values) s += fmt::format("{}{}", s.empty() ? "" : ", ", v);
  if (a.kind == AxisKind::Int)
    for (int64_t v : a.int_values) s += fmt::format("{}{}", s.empty() ? "" : ", ", v);
  if (a.kind == AxisKind::Int && a.jit_max > 0)
    s += fmt::format(", or {}..{} in multiples of {} (JIT)", a.jit_min, a.jit_max, a.jit_multiple_of);
  if (a.kind == AxisKind::Flag) s = "on, off";
  return s;
}

BackendDef parse_backend_section(const SpecReader& r, const YAML::Node& n, const std::string& name,
                                 const std::vector<AxisDef>& axes,
                                 const std::vector<ProblemVarDef>& problem,
                                 const std::map<std::string, int64_t>& enum_constants,
                                 const TargetTable* targets) {
  const std::string path = "backends." + name;
  Fields f = r.fields(n, path,
                      {"targets", "template", "suffix", "domains", "constraints", "configs",
                       "heuristic", "aot", "doc"},
                      {"targets", "template", "suffix"});
  BackendDef b;
  b.name = name;
  b.line = f.line;
  b.targets = parse_targets(r, *f.find("targets"), SpecReader::join(path, "targets"), name, targets);
  for (const TargetDef& t : b.targets)
    check_requirements(r, name, t, SpecReader::join(SpecReader::join(path, "targets"), t.name));
  b.template_file = r.scalar(*f.find("template"), SpecReader::join(path, "template"));
  if (b.template_file.find("..") != std::string::npos || b.template_file.front() == '/')
    r.fail(*f.find("template"), SpecReader::join(path, "template"), "expected a file name under templates/");
  b.source_suffix = r.scalar(*f.find("suffix"), SpecReader::join(path, "suffix"));
  if (b.source_suffix.front() != '.' || b.source_suffix.find('/') != std::string::npos)
    r.fail(*f.find("suffix"), SpecReader::join(path, "suffix"), "expected a file suffix such as .cpp");
  if (const YAML::Node* d = f.find("doc")) b.doc = r.text(*d, SpecReader::join(path, "doc"));
  b.axes = axes;
  if (const YAML::Node* d = f.find("domains")) apply_domains(r, *d, SpecReader::join(path, "domains"), b.axes);

  std::set<std::string> taken, target_vars;
  for (const AxisDef& a : axes) taken.insert(a.name);
  for (const ProblemVarDef& p : problem) taken.insert(p.name);
  for (const auto& [c, v] : enum_constants) taken.insert(c);
  check_names_distinct(r, b, path, taken);
  for (const auto& [var, v] : b.targets.front().vars) target_vars.insert(var);

  std::set<std::string> constraint_names = target_vars, heuristic_names = target_vars;
  for (const AxisDef& a : axes) constraint_names.insert(a.name);
  for (const ProblemVarDef& p : problem) heuristic_names.insert(p.name);
  for (const auto& [c, v] : enum_constants) constraint_names.insert(c), heuristic_names.insert(c);

  if (const YAML::Node* c = f.find("constraints")) {
    const std::string cpath = SpecReader::join(path, "constraints");
    const std::vector<YAML::Node> items = r.list(*c, cpath, true);
    for (size_t i = 0; i < items.size(); ++i) {
      b.constraints.push_back(r.scalar(items[i], SpecReader::index(cpath, i)));
      b.constraint_lines.push_back(SpecReader::line(items[i]));
      check_expr(r, b.constraint_lines.back(), SpecReader::index(cpath, i), b.constraints.back(),
                 constraint_names);
    }
  }
  if (const YAML::Node* c = f.find("configs")) {
    const std::string cpath = SpecReader::join(path, "configs");
    const std::vector<YAML::Node> items = r.list(*c, cpath, false);
    for (size_t i = 0; i < items.size(); ++i) {
      b.configs.push_back(parse_choice(r, items[i], SpecReader::index(cpath, i), b.axes, false));
      if (b.configs.back().size() != b.configs.front().size() ||
          !std::equal(b.configs.back().begin(), b.configs.back().end(), b.configs.front().begin(),
                      [](const auto& x, const auto& y) { return x.first == y.first; }))
        r.fail(items[i], SpecReader::index(cpath, i), "every config must name the same axes");
    }
  }
  if (const YAML::Node* h = f.find("heuristic"))
    b.heuristic = parse_heuristic(r, *h, SpecReader::join(path, "heuristic"), b, heuristic_names);
  if (const YAML::Node* a = f.find("aot")) {
    const std::string apath = SpecReader::join(path, "aot");
    const std::vector<YAML::Node> items = r.list(*a, apath, true);
    for (size_t i = 0; i < items.size(); ++i) {
      b.aot.push_back(parse_aot_set(r, items[i], SpecReader::index(apath, i), b));
      b.aot_lines.push_back(SpecReader::line(items[i]));
    }
  }
  return b;
}

}  // namespace ejk::detail

namespace ejk {

TargetTable TargetTable::parse(std::string_view yaml_text, std::string file_name) {
  detail::SpecReader r(file_name);
  const YAML::Node root = r.load(yaml_text);
  if (!root.IsMap()) r.fail(root.IsDefined() ? detail::SpecReader::line(root) : 1, "", "expected a map of sections");
  detail::Fields top = r.fields(root, "", {"targets", "doc"}, {"targets"});
  detail::Fields backends = r.open_fields(*top.find("targets"), "targets");
  TargetTable t;
  for (const auto& [name, node] : backends.entries()) {
    if (!detail::is_token(name)) r.fail(node, "targets." + name, "a backend name must be a token [a-z0-9]+");
    if (!node.IsMap()) r.fail(node, "targets." + name, "expected a map of targets (name: {flags, requires, vars})");
    t.backends[name] = detail::parse_targets(r, node, "targets." + name, name, nullptr);
  }
  return t;
}

}  // namespace ejk
