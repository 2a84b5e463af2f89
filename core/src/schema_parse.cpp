// OpSchema::parse: YAML -> validated schema. Validation is strict on purpose: a typo in a spec
// (an unknown key, a misspelled identifier, an AOT value outside its axis) must fail when the
// spec is loaded, with the file and line, not silently drop a variant from the build.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "ejk/core/schema.h"
#include "schema_internal.h"
#include "spec_reader.h"

namespace ejk {
namespace {

using detail::Fields;
using detail::SpecReader;

void parse_jit_range(const SpecReader& r, const YAML::Node& n, const std::string& path,
                     AxisDef& a) {
  Fields f = r.fields(n, path, {"min", "max", "multiple_of"}, {"min", "max"});
  a.jit_min = r.integer(*f.find("min"), SpecReader::join(path, "min"));
  a.jit_max = r.integer(*f.find("max"), SpecReader::join(path, "max"));
  a.jit_multiple_of = 1;
  if (const YAML::Node* m = f.find("multiple_of"))
    a.jit_multiple_of = r.integer(*m, SpecReader::join(path, "multiple_of"));
  if (a.jit_min < 0 || a.jit_min > a.jit_max)
    r.fail(n, path, fmt::format("expected 0 <= min <= max, got {}..{}", a.jit_min, a.jit_max));
  // max >= 1 keeps "no JIT range" (max == 0) distinct from a range.
  if (a.jit_max < 1) r.fail(n, path, "max must be >= 1");
  if (a.jit_multiple_of < 1) r.fail(n, path, "multiple_of must be >= 1");
}

AxisDef parse_axis(const SpecReader& r, const YAML::Node& n, const std::string& path) {
  Fields f = r.fields(n, path, {"name", "kind", "prefix", "token", "values", "jit", "tuning", "from", "doc"},
                      {"name", "kind"});
  AxisDef a;
  a.line = f.line;
  a.name = r.identifier(*f.find("name"), SpecReader::join(path, "name"));
  const std::string kind = r.scalar(*f.find("kind"), SpecReader::join(path, "kind"));
  // Which keys each kind takes; anything else is a mistake worth reporting.
  std::vector<std::string> takes;
  if (kind == "int") {
    a.kind = AxisKind::Int;
    takes = {"prefix", "values"};
  } else if (kind == "enum") {
    a.kind = AxisKind::Enum;
    takes = {"values"};
  } else if (kind == "flag") {
    a.kind = AxisKind::Flag;
    takes = {"token"};
  } else {
    r.fail(*f.find("kind"), SpecReader::join(path, "kind"),
           fmt::format("'{}': expected int, enum or flag", kind));
  }
  for (const char* k : {"prefix", "token", "values", "jit"}) {
    const bool wanted = std::count(takes.begin(), takes.end(), k) > 0;
    const bool optional = a.kind == AxisKind::Int && std::string_view(k) == "jit";
    if (!wanted && !optional && f.has(k))
      r.fail(*f.find(k), SpecReader::join(path, k), fmt::format("not a key of {} {} axis", kind == "flag" ? "a" : "an", kind));
    if (wanted && !f.has(k)) r.fail(f.line, SpecReader::join(path, k), "missing required key");
  }
  if (a.kind == AxisKind::Int) {
    a.token = r.token(*f.find("prefix"), SpecReader::join(path, "prefix"));
    // Letters only, so "d" + "128" can never be read back as another prefix plus digits.
    if (a.token.find_first_of("0123456789") != std::string::npos)
      r.fail(*f.find("prefix"), SpecReader::join(path, "prefix"), "a prefix must be letters only");
  }
  if (a.kind == AxisKind::Flag) a.token = r.token(*f.find("token"), SpecReader::join(path, "token"));
  if (const YAML::Node* t = f.find("tuning")) {
    if (a.kind != AxisKind::Flag) r.fail(*t, SpecReader::join(path, "tuning"), "only a flag axis can be a tuning flag");
    a.tuning = r.boolean(*t, SpecReader::join(path, "tuning"));
  }
  if (a.kind != AxisKind::Flag) detail::parse_domain(r, f, path, a);
  if (const YAML::Node* from = f.find("from")) {
    if (a.kind != AxisKind::Int) r.fail(*from, SpecReader::join(path, "from"), "only an int axis takes its value from a size");
    a.from = r.scalar(*from, SpecReader::join(path, "from"));
  }
  if (const YAML::Node* d = f.find("doc")) a.doc = r.text(*d, SpecReader::join(path, "doc"));
  return a;
}

bool looks_like_int_token(std::string_view tok, const std::vector<AxisDef>& axes) {
  for (const AxisDef& a : axes) {
    if (a.kind != AxisKind::Int || tok.size() <= a.token.size() || tok.substr(0, a.token.size()) != a.token)
      continue;
    if (tok.substr(a.token.size()).find_first_not_of("0123456789") == std::string_view::npos) return true;
  }
  return false;
}

// Every key token must be readable back unambiguously by parse_key.
void check_tokens_unique(const SpecReader& r, const std::vector<AxisDef>& axes) {
  std::map<std::string, std::string> owner;  // token -> axis
  for (size_t i = 0; i < axes.size(); ++i) {
    const AxisDef& a = axes[i];
    const char* key = a.kind == AxisKind::Int ? "prefix" : a.kind == AxisKind::Flag ? "token" : "values";
    const std::string path = fmt::format("axes[{}].{}", i, key);
    std::vector<std::string> toks = a.kind == AxisKind::Enum ? a.enum_values : std::vector{a.token};
    for (const std::string& t : toks) {
      if (auto [it, fresh] = owner.emplace(t, a.name); !fresh)
        r.fail(a.line, path, fmt::format("token '{}' is also used by axis '{}'", t, it->second));
      if (a.kind != AxisKind::Int && looks_like_int_token(t, axes))
        r.fail(a.line, path, fmt::format("token '{}' reads as an int axis prefix plus a number", t));
    }
  }
}

std::vector<AxisDef> parse_axes(const SpecReader& r, const YAML::Node& n) {
  std::vector<AxisDef> axes;
  const std::vector<YAML::Node> items = r.list(n, "axes", false);
  for (size_t i = 0; i < items.size(); ++i) {
    AxisDef a = parse_axis(r, items[i], SpecReader::index("axes", i));
    for (const AxisDef& b : axes)
      if (b.name == a.name)
        r.fail(a.line, SpecReader::index("axes", i) + ".name",
               fmt::format("duplicate axis name '{}' (first defined on line {})", a.name, b.line));
    axes.push_back(std::move(a));
  }
  check_tokens_unique(r, axes);
  return axes;
}

const AxisDef* find_axis(const std::vector<AxisDef>& axes, std::string_view name) {
  for (const AxisDef& a : axes)
    if (a.name == name) return &a;
  return nullptr;
}

std::map<std::string, int64_t> collect_enum_constants(const SpecReader& r,
                                                      const std::vector<AxisDef>& axes) {
  std::map<std::string, int64_t> out;
  for (const AxisDef& a : axes) {
    if (a.kind != AxisKind::Enum) continue;
    for (size_t i = 0; i < a.enum_values.size(); ++i) {
      const std::string& v = a.enum_values[i];
      if (find_axis(axes, v))
        r.fail(a.line, "axes." + a.name, fmt::format("enum value '{}' is also an axis name", v));
      out[v] = static_cast<int64_t>(i);
    }
  }
  return out;
}

}  // namespace

namespace detail {

void parse_domain(const SpecReader& r, const Fields& f, const std::string& path, AxisDef& a) {
  const std::string vpath = SpecReader::join(path, "values");
  const std::vector<YAML::Node> values = r.list(*f.find("values"), vpath, false);
  a.int_values.clear();
  a.enum_values.clear();
  a.jit_min = a.jit_max = 0;
  a.jit_multiple_of = 1;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string ipath = SpecReader::index(vpath, i);
    if (a.kind == AxisKind::Int) {
      const int64_t v = r.integer(values[i], ipath);
      if (v < 0) r.fail(values[i], ipath, fmt::format("{} is negative: expected >= 0", v));
      if (std::count(a.int_values.begin(), a.int_values.end(), v))
        r.fail(values[i], ipath, fmt::format("{} is listed twice", v));
      a.int_values.push_back(v);
    } else {
      std::string v = r.token(values[i], ipath);
      if (std::count(a.enum_values.begin(), a.enum_values.end(), v))
        r.fail(values[i], ipath, fmt::format("'{}' is listed twice", v));
      a.enum_values.push_back(std::move(v));
    }
  }
  if (const YAML::Node* jit = f.find("jit")) {
    if (a.kind != AxisKind::Int) r.fail(*jit, SpecReader::join(path, "jit"), "only int axes have a JIT range");
    parse_jit_range(r, *jit, SpecReader::join(path, "jit"), a);
  }
}

}  // namespace detail

namespace {

// `tolerance: {bf16: 2e-2}`: rel-L2 bounds per element type over the defaults (f32 1e-5, bf16
// and f16 1e-2), each a number in (0, 1).
std::map<std::string, double> parse_tolerance(const SpecReader& r, const YAML::Node* n) {
  std::map<std::string, double> out{{"f32", 1e-5}, {"bf16", 1e-2}, {"f16", 1e-2}};
  if (!n) return out;
  const Fields given = r.open_fields(*n, "tolerance");
  for (const auto& [dtype, v] : given.entries()) {
    const std::string path = SpecReader::join("tolerance", dtype);
    if (!out.count(dtype)) r.fail(v, path, "expected an element type: f32, bf16 or f16");
    const std::string text = r.scalar(v, path);
    char* end = nullptr;
    const double x = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || !(x > 0 && x < 1))
      r.fail(v, path, fmt::format("expected a number in (0, 1), got '{}'", text));
    out[dtype] = x;
  }
  return out;
}

}  // namespace

OpSchema OpSchema::parse(std::string_view yaml_text, std::string file_name, const TargetTable* targets) {
  SpecReader r(file_name);
  const YAML::Node root = r.load(yaml_text);
  if (!root.IsMap()) r.fail(root.IsDefined() ? SpecReader::line(root) : 1, "", "expected a map of sections");
  Fields top = r.fields(root, "",
                        {"op", "api", "internal", "doc", "modes", "tensors", "scalars", "together", "problem", "axes",
                         "tolerance", "backends"},
                        {"op", "api", "tensors", "axes", "backends"});
  OpSchema s;
  s.file_ = std::move(file_name);
  s.op_ = r.identifier(*top.find("op"), "op");
  s.api_ = r.identifier(*top.find("api"), "api");
  if (const YAML::Node* d = top.find("doc")) s.doc_ = r.text(*d, "doc");
  if (const YAML::Node* i = top.find("internal")) s.internal_ = r.boolean(*i, "internal");
  s.axes_ = parse_axes(r, *top.find("axes"));
  s.tolerance_ = parse_tolerance(r, top.find("tolerance"));
  s.enum_constants_ = collect_enum_constants(r, s.axes_);
  detail::ArgSections args = detail::parse_arg_sections(r, top, s.axes_, s.enum_constants_, s.internal_);
  for (size_t i = 0; i < args.modes.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (args.modes[i].name == args.modes[j].name)
        r.fail(args.modes[i].line, SpecReader::index("modes", i),
               fmt::format("a second mode named '{}' (the first is modes[{}])", args.modes[i].name, j));
  s.modes_ = std::move(args.modes);
  s.tensors_ = std::move(args.tensors);
  s.scalars_ = std::move(args.scalars);
  s.together_ = std::move(args.together);
  s.problem_ = std::move(args.problem);
  s.symbols_ = std::move(args.symbols);
  for (const ProblemVarDef& p : s.problem_)
    if (s.enum_constants_.count(p.name))
      r.fail(top.find("problem")->Mark().line + 1, "problem." + p.name,
             "is also an enum value; expressions could not tell them apart");
  Fields backends = r.open_fields(*top.find("backends"), "backends");
  if (backends.entries().empty()) r.fail(backends.line, "backends", "expected at least one backend");
  for (const auto& [name, node] : backends.entries()) {
    if (!detail::is_token(name))
      r.fail(node, "backends." + name, "a backend name must be a token [a-z0-9]+");
    s.backends_.push_back(detail::parse_backend_section(r, node, name, s.axes_, s.problem_, s.enum_constants_, targets));
  }
  s.check_aot_sets();
  return s;
}

}  // namespace ejk
