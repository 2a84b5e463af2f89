// OpSchema::parse: YAML -> validated schema. Validation is strict on purpose: a typo in a spec
// (an unknown key, a misspelled identifier, an AOT value outside its axis) must fail when the
// spec is loaded, with the file and line, not silently drop a variant from the build.
#include <fmt/format.h>

#include <algorithm>
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

const std::set<std::string>& known_dtypes() {
  static const std::set<std::string> names = {"f32", "bf16", "f16", "f64", "i32", "i64", "u8"};
  return names;
}

const std::set<std::string>& known_scalar_types() {
  static const std::set<std::string> names = {"f32", "f64", "i32", "i64", "bool", "i64[2]"};
  return names;
}

std::string list_names(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += fmt::format("{}{}", s.empty() ? "" : ", ", n);
  return s;
}

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
  Fields f = r.fields(n, path, {"name", "kind", "prefix", "token", "values", "jit", "tuning", "doc"},
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

std::string check_flag_axis(const SpecReader& r, const Fields& f, const std::string& path,
                            const std::vector<AxisDef>& axes) {
  const YAML::Node* n = f.find("sets_flag");
  if (!n) return "";
  std::string name = r.identifier(*n, SpecReader::join(path, "sets_flag"));
  const AxisDef* a = find_axis(axes, name);
  if (!a || a->kind != AxisKind::Flag)
    r.fail(*n, SpecReader::join(path, "sets_flag"), fmt::format("'{}' is not a flag axis", name));
  if (a->tuning)
    r.fail(*n, SpecReader::join(path, "sets_flag"),
           fmt::format("'{}' is a tuning flag: heuristics choose it, no argument sets it", name));
  return name;
}

std::vector<TensorArgDef> parse_tensors(const SpecReader& r, const YAML::Node& n,
                                        const std::vector<AxisDef>& axes) {
  std::vector<TensorArgDef> out;
  const std::vector<YAML::Node> items = r.list(n, "tensors", false);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string path = SpecReader::index("tensors", i);
    Fields f = r.fields(items[i], path,
                        {"name", "layout", "dtypes", "optional", "output", "sets_flag", "doc"},
                        {"name", "layout", "dtypes"});
    TensorArgDef t;
    t.line = f.line;
    t.name = r.identifier(*f.find("name"), SpecReader::join(path, "name"));
    t.layout = r.scalar_list(*f.find("layout"), SpecReader::join(path, "layout"), false);
    t.dtypes = r.scalar_list(*f.find("dtypes"), SpecReader::join(path, "dtypes"), false);
    for (const std::string& d : t.dtypes) {
      const AxisDef* a = find_axis(axes, d);
      if (!known_dtypes().count(d) && !(a && a->kind == AxisKind::Enum))
        r.fail(*f.find("dtypes"), SpecReader::join(path, "dtypes"),
               fmt::format("'{}' is neither a dtype ({}) nor an enum axis", d, list_names(known_dtypes())));
    }
    if (const YAML::Node* o = f.find("optional")) t.optional = r.boolean(*o, SpecReader::join(path, "optional"));
    if (const YAML::Node* o = f.find("output")) t.output = r.boolean(*o, SpecReader::join(path, "output"));
    t.sets_flag = check_flag_axis(r, f, path, axes);
    if (const YAML::Node* d = f.find("doc")) t.doc = r.text(*d, SpecReader::join(path, "doc"));
    for (const TensorArgDef& u : out)
      if (u.name == t.name) r.fail(t.line, path, fmt::format("duplicate tensor '{}'", t.name));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<ScalarArgDef> parse_scalars(const SpecReader& r, const YAML::Node& n,
                                        const std::vector<AxisDef>& axes) {
  std::vector<ScalarArgDef> out;
  const std::vector<YAML::Node> items = r.list(n, "scalars", true);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string path = SpecReader::index("scalars", i);
    Fields f = r.fields(items[i], path, {"name", "type", "default", "sets_flag", "doc"},
                        {"name", "type", "default"});
    ScalarArgDef s;
    s.line = f.line;
    s.name = r.identifier(*f.find("name"), SpecReader::join(path, "name"));
    s.type = r.scalar(*f.find("type"), SpecReader::join(path, "type"));
    if (!known_scalar_types().count(s.type))
      r.fail(*f.find("type"), SpecReader::join(path, "type"),
             fmt::format("'{}': expected one of {}", s.type, list_names(known_scalar_types())));
    s.default_value = r.scalar(*f.find("default"), SpecReader::join(path, "default"));
    s.sets_flag = check_flag_axis(r, f, path, axes);
    if (const YAML::Node* d = f.find("doc")) s.doc = r.text(*d, SpecReader::join(path, "doc"));
    for (const ScalarArgDef& u : out)
      if (u.name == s.name) r.fail(s.line, path, fmt::format("duplicate scalar '{}'", s.name));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ProblemVarDef> parse_problem(const SpecReader& r, const YAML::Node& n) {
  std::vector<ProblemVarDef> out;
  Fields f = r.open_fields(n, "problem");
  for (const auto& [name, doc] : f.entries()) {
    const std::string path = SpecReader::join("problem", name);
    if (!detail::is_identifier(name)) r.fail(doc, path, "expected a name [a-z_][a-z0-9_]*");
    out.push_back({name, r.text(doc, path)});
  }
  return out;
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

OpSchema OpSchema::parse(std::string_view yaml_text, std::string file_name) {
  SpecReader r(file_name);
  const YAML::Node root = r.load(yaml_text);
  if (!root.IsMap()) r.fail(root.IsDefined() ? SpecReader::line(root) : 1, "", "expected a map of sections");
  Fields top = r.fields(root, "",
                        {"op", "api", "doc", "tensors", "scalars", "problem", "axes", "backends"},
                        {"op", "api", "tensors", "axes", "backends"});
  OpSchema s;
  s.file_ = std::move(file_name);
  s.op_ = r.identifier(*top.find("op"), "op");
  s.api_ = r.identifier(*top.find("api"), "api");
  if (const YAML::Node* d = top.find("doc")) s.doc_ = r.text(*d, "doc");
  s.axes_ = parse_axes(r, *top.find("axes"));
  s.enum_constants_ = collect_enum_constants(r, s.axes_);
  s.tensors_ = parse_tensors(r, *top.find("tensors"), s.axes_);
  if (const YAML::Node* n = top.find("scalars")) s.scalars_ = parse_scalars(r, *n, s.axes_);
  if (const YAML::Node* n = top.find("problem")) s.problem_ = parse_problem(r, *n);
  for (const ProblemVarDef& p : s.problem_)
    if (s.enum_constants_.count(p.name))
      r.fail(top.find("problem")->Mark().line + 1, "problem." + p.name,
             "is also an enum value; expressions could not tell them apart");
  Fields backends = r.open_fields(*top.find("backends"), "backends");
  if (backends.entries().empty()) r.fail(backends.line, "backends", "expected at least one backend");
  for (const auto& [name, node] : backends.entries()) {
    if (!detail::is_token(name))
      r.fail(node, "backends." + name, "a backend name must be a token [a-z0-9]+");
    s.backends_.push_back(detail::parse_backend_section(r, node, name, s.axes_, s.problem_, s.enum_constants_));
  }
  s.check_aot_sets();
  return s;
}

}  // namespace ejk
