// The argument sections of a spec: modes, tensors (with symbolic layouts), scalars, `together`
// groups and problem variables. Checked as strictly as the rest: an unknown symbol in an output
// layout, a mode that names no tensor, or a problem variable with no source fails at load.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "ejk/core/expr.h"
#include "schema_internal.h"

namespace ejk::detail {
namespace {

const std::set<std::string>& known_dtypes() {
  static const std::set<std::string> names = {"f32", "bf16", "f16", "f64", "i32", "i64", "u8"};
  return names;
}

std::string list_names(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += fmt::format("{}{}", s.empty() ? "" : ", ", n);
  return s;
}

const AxisDef* find_axis(const std::vector<AxisDef>& axes, std::string_view name) {
  for (const AxisDef& a : axes)
    if (a.name == name) return &a;
  return nullptr;
}

bool is_symbol(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool parse_count(std::string_view s, int64_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

int intern(std::vector<std::string>& symbols, std::string_view name) {
  auto it = std::find(symbols.begin(), symbols.end(), name);
  if (it != symbols.end()) return static_cast<int>(it - symbols.begin());
  symbols.emplace_back(name);
  return static_cast<int>(symbols.size() - 1);
}

// One layout token (see LayoutDim); `what` is empty on success.
LayoutDim parse_dim(std::string_view tok, std::vector<std::string>& symbols, std::string& what) {
  LayoutDim d;
  if (tok == "...") {
    d.kind = LayoutDim::Kind::Ellipsis;
    return d;
  }
  if (!tok.empty() && tok.back() == '?') {
    d.optional = true;
    tok.remove_suffix(1);
  }
  int64_t n = 0;
  if (parse_count(tok, n)) {
    d.kind = LayoutDim::Kind::Literal;
    d.value = n;
    return d;
  }
  if (tok.size() > 2 && tok.substr(tok.size() - 2) == "|1") {
    d.broadcast = true;
    tok.remove_suffix(2);
  } else if (auto plus = tok.find('+'); plus != std::string_view::npos) {
    if (!parse_count(tok.substr(plus + 1), d.value)) {
      what = "expected SYMBOL+N with N a number";
      return d;
    }
    tok = tok.substr(0, plus);
  }
  if (!is_symbol(tok)) {
    what = "expected a size symbol (e.g. Sq), a number, X|1, X+N, X? or ...";
    return d;
  }
  d.symbol = intern(symbols, tok);
  return d;
}

Layout parse_layout(const SpecReader& r, const YAML::Node& n, const std::string& path,
                    std::vector<std::string>& symbols) {
  Layout l;
  const std::vector<std::string> toks = r.scalar_list(n, path, true);
  bool seen_required = false, seen_ellipsis = false;
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string what;
    LayoutDim d = parse_dim(toks[i], symbols, what);
    if (!what.empty()) r.fail(n, path, fmt::format("'{}': {}", toks[i], what));
    const bool leading = d.optional || d.kind == LayoutDim::Kind::Ellipsis;
    if (leading && seen_required)
      r.fail(n, path, fmt::format("'{}': optional dims and ... must come first", toks[i]));
    if (d.kind == LayoutDim::Kind::Ellipsis && (seen_ellipsis || i != 0))
      r.fail(n, path, "'...' may appear once, as the first dim");
    seen_ellipsis = seen_ellipsis || d.kind == LayoutDim::Kind::Ellipsis;
    seen_required = seen_required || !leading;
    l.dims.push_back(d);
    l.text += fmt::format("{}{}", l.text.empty() ? "[" : ", ", toks[i]);
  }
  if (seen_ellipsis && std::any_of(l.dims.begin(), l.dims.end(), [](const LayoutDim& d) { return d.optional; }))
    r.fail(n, path, "a layout with '...' cannot also have optional dims");
  l.text += l.text.empty() ? "[]" : "]";
  return l;
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

std::vector<ModeDef> parse_modes(const SpecReader& r, const YAML::Node& n) {
  std::vector<ModeDef> out;
  const std::vector<YAML::Node> items = r.list(n, "modes", false);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string path = SpecReader::index("modes", i);
    Fields f = r.fields(items[i], path, {"name", "when", "requires", "forbids", "doc"}, {"name", "when"});
    ModeDef m;
    m.line = f.line;
    m.name = r.identifier(*f.find("name"), SpecReader::join(path, "name"));
    m.when = r.identifier(*f.find("when"), SpecReader::join(path, "when"));
    if (const YAML::Node* q = f.find("requires"))
      m.requires_args = r.scalar_list(*q, SpecReader::join(path, "requires"), true);
    if (const YAML::Node* q = f.find("forbids"))
      m.forbids_args = r.scalar_list(*q, SpecReader::join(path, "forbids"), true);
    if (const YAML::Node* d = f.find("doc")) m.doc = r.text(*d, SpecReader::join(path, "doc"));
    out.push_back(std::move(m));
  }
  return out;
}

void check_dtypes(const SpecReader& r, const Fields& f, const std::string& path,
                  const std::vector<AxisDef>& axes, const std::vector<std::string>& dtypes) {
  for (const std::string& d : dtypes) {
    const AxisDef* a = find_axis(axes, d);
    if (!known_dtypes().count(d) && !(a && a->kind == AxisKind::Enum))
      r.fail(*f.find("dtypes"), SpecReader::join(path, "dtypes"),
             fmt::format("'{}' is neither a dtype ({}) nor an enum axis", d, list_names(known_dtypes())));
  }
}

TensorArgDef parse_tensor(const SpecReader& r, const YAML::Node& n, const std::string& path,
                          const ArgSections& args, const std::vector<AxisDef>& axes,
                          std::vector<std::string>& symbols) {
  Fields f = r.open_fields(n, path);
  static const std::set<std::string> keys = {"name", "layout", "like", "dtypes", "optional", "output",
                                             "contiguous", "sets_flag", "in_place", "doc"};
  TensorArgDef t;
  t.line = f.line;
  for (const auto& [key, node] : f.entries()) {
    const bool is_mode = std::any_of(args.modes.begin(), args.modes.end(), [&](const ModeDef& m) { return m.name == key; });
    if (is_mode) t.mode_layouts[key] = parse_layout(r, node, SpecReader::join(path, key), symbols);
    else if (!keys.count(key))
      r.fail(node, SpecReader::join(path, key), fmt::format("unknown key (expected one of {} or a mode name)", list_names(keys)));
  }
  if (!f.has("name") || !f.has("dtypes")) r.fail(f.line, path, "a tensor needs name and dtypes");
  t.name = r.argument_name(*f.find("name"), SpecReader::join(path, "name"));
  if (f.has("layout") == f.has("like")) r.fail(f.line, path, "give exactly one of layout and like");
  if (const YAML::Node* l = f.find("layout")) t.layout = parse_layout(r, *l, SpecReader::join(path, "layout"), symbols);
  if (const YAML::Node* l = f.find("like")) t.like = r.identifier(*l, SpecReader::join(path, "like"));
  t.dtypes = r.scalar_list(*f.find("dtypes"), SpecReader::join(path, "dtypes"), false);
  check_dtypes(r, f, path, axes, t.dtypes);
  if (const YAML::Node* o = f.find("optional")) t.optional = r.boolean(*o, SpecReader::join(path, "optional"));
  if (const YAML::Node* o = f.find("output")) t.output = r.boolean(*o, SpecReader::join(path, "output"));
  if (const YAML::Node* o = f.find("contiguous")) t.contiguous = r.boolean(*o, SpecReader::join(path, "contiguous"));
  t.sets_flag = check_flag_axis(r, f, path, axes);
  if (const YAML::Node* d = f.find("doc")) t.doc = r.text(*d, SpecReader::join(path, "doc"));
  if (const YAML::Node* p = f.find("in_place")) t.in_place = r.scalar_list(*p, SpecReader::join(path, "in_place"), false);
  if (!t.in_place.empty() && !t.output) r.fail(f.line, SpecReader::join(path, "in_place"), "only outputs can be written in place");
  if (!t.like.empty() && !t.output) r.fail(f.line, SpecReader::join(path, "like"), "only outputs take another tensor's shape");
  return t;
}

ScalarType scalar_type(const SpecReader& r, const YAML::Node& n, const std::string& path) {
  static const std::map<std::string, ScalarType> types = {{"f32", ScalarType::f32}, {"f64", ScalarType::f64},
                                                          {"i64", ScalarType::i64}, {"bool", ScalarType::boolean},
                                                          {"i64[2]", ScalarType::i64x2}};
  const std::string name = r.scalar(n, path);
  auto it = types.find(name);
  if (it == types.end()) r.fail(n, path, fmt::format("'{}': expected f32, f64, i64, bool or i64[2]", name));
  return it->second;
}

bool parse_number(std::string_view text, double& out) {
  if (text.empty() || text.size() > 64) return false;
  const std::string t(text);
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && std::isfinite(out);
}

// min, max, finite, positive: what the binder enforces on the value (schema.h, ScalarArgDef).
void parse_scalar_range(const SpecReader& r, const Fields& f, const std::string& path, ScalarArgDef& s) {
  const bool numeric = s.type != ScalarType::boolean, floating = s.type == ScalarType::f32 || s.type == ScalarType::f64;
  for (const char* key : {"min", "max"}) {
    const YAML::Node* n = f.find(key);
    if (!n) continue;
    const std::string kpath = SpecReader::join(path, key);
    if (!numeric) r.fail(*n, kpath, "a bool has no range");
    double v = 0;
    if (!parse_number(r.scalar(*n, kpath), v)) r.fail(*n, kpath, "expected a finite number");
    if (!floating && v != std::floor(v)) r.fail(*n, kpath, fmt::format("an integer scalar takes an integer bound, got {}", v));
    (key[1] == 'i' ? s.has_min : s.has_max) = true;
    (key[1] == 'i' ? s.min : s.max) = v;
  }
  if (s.has_min && s.has_max && s.min > s.max)
    r.fail(f.line, path, fmt::format("min {} is above max {}", s.min, s.max));
  if (const YAML::Node* n = f.find("finite")) {
    if (!floating) r.fail(*n, SpecReader::join(path, "finite"), "only f32 and f64 scalars can be non-finite");
    s.finite = r.boolean(*n, SpecReader::join(path, "finite"));
  }
  if (const YAML::Node* n = f.find("positive")) {
    if (!numeric) r.fail(*n, SpecReader::join(path, "positive"), "a bool cannot be positive");
    s.positive = r.boolean(*n, SpecReader::join(path, "positive"));
  }
}

// struct and fields: the names the typed APIs give an i64[2] pair.
void parse_pair_struct(const SpecReader& r, const Fields& f, const std::string& path, ScalarArgDef& s) {
  const YAML::Node* st = f.find("struct");
  const YAML::Node* fl = f.find("fields");
  if (!st && !fl) return;
  if (s.type != ScalarType::i64x2 || !st || !fl)
    r.fail(f.line, path, "struct and fields go together, on an i64[2] scalar");
  s.pair_struct = r.scalar(*st, SpecReader::join(path, "struct"));
  const bool camel = !s.pair_struct.empty() && std::isupper(static_cast<unsigned char>(s.pair_struct[0])) &&
                     std::all_of(s.pair_struct.begin(), s.pair_struct.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  if (!camel) r.fail(*st, SpecReader::join(path, "struct"), "expected a C++ type name in CamelCase (e.g. SlidingWindow)");
  s.pair_fields = r.scalar_list(*fl, SpecReader::join(path, "fields"), false);
  if (s.pair_fields.size() != 2 || s.pair_fields[0] == s.pair_fields[1] || !is_identifier(s.pair_fields[0]) ||
      !is_identifier(s.pair_fields[1]))
    r.fail(*fl, SpecReader::join(path, "fields"), "expected two distinct field names [a-z_][a-z0-9_]*");
}

std::vector<ScalarArgDef> parse_scalars(const SpecReader& r, const YAML::Node& n,
                                        const std::vector<AxisDef>& axes, std::vector<std::string>& symbols) {
  std::vector<ScalarArgDef> out;
  const std::vector<YAML::Node> items = r.list(n, "scalars", true);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string path = SpecReader::index("scalars", i);
    Fields f = r.fields(items[i], path,
                        {"name", "type", "default", "sets_flag", "binds", "min", "max", "finite", "positive", "struct",
                         "fields", "doc"},
                        {"name", "type", "default"});
    ScalarArgDef s;
    s.line = f.line;
    s.name = r.argument_name(*f.find("name"), SpecReader::join(path, "name"));
    s.type_name = r.scalar(*f.find("type"), SpecReader::join(path, "type"));
    s.type = scalar_type(r, *f.find("type"), SpecReader::join(path, "type"));
    s.default_value = r.scalar(*f.find("default"), SpecReader::join(path, "default"));
    s.sets_flag = check_flag_axis(r, f, path, axes);
    if (const YAML::Node* b = f.find("binds")) {
      const std::string sym = r.scalar(*b, SpecReader::join(path, "binds"));
      if (s.type != ScalarType::i64 || !is_symbol(sym))
        r.fail(*b, SpecReader::join(path, "binds"), "an i64 scalar binds a size symbol (e.g. T)");
      s.binds = intern(symbols, sym);
    }
    parse_scalar_range(r, f, path, s);
    parse_pair_struct(r, f, path, s);
    if (const YAML::Node* d = f.find("doc")) s.doc = r.text(*d, SpecReader::join(path, "doc"));
    for (const ScalarArgDef& u : out)
      if (u.name == s.name) r.fail(s.line, path, fmt::format("duplicate scalar '{}'", s.name));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ProblemVarDef> parse_problem(const SpecReader& r, const YAML::Node& n,
                                         const std::vector<AxisDef>& axes,
                                         const std::map<std::string, int64_t>& enum_constants) {
  std::vector<ProblemVarDef> out;
  Fields f = r.open_fields(n, "problem");
  std::set<std::string> known;
  for (const AxisDef& a : axes) known.insert(a.name);
  for (const auto& [c, v] : enum_constants) known.insert(c);
  for (const auto& [name, node] : f.entries()) {
    const std::string path = SpecReader::join("problem", name);
    if (!is_identifier(name)) r.fail(node, path, "expected a name [a-z_][a-z0-9_]*");
    Fields vf = r.fields(node, path, {"doc", "expr", "default"}, {"doc"});
    ProblemVarDef p;
    p.name = name;
    p.line = vf.line;
    p.doc = r.text(*vf.find("doc"), SpecReader::join(path, "doc"));
    if (const YAML::Node* e = vf.find("expr")) p.expr = r.scalar(*e, SpecReader::join(path, "expr"));
    if (const YAML::Node* d = vf.find("default")) {
      p.has_default = true;
      p.default_value = r.integer(*d, SpecReader::join(path, "default"));
    }
    const int sources = int(find_axis(axes, name) != nullptr) + int(!p.expr.empty()) + int(p.has_default);
    if (sources != 1)
      r.fail(vf.line, path, "needs exactly one source: the name of an axis, an expr, or a default "
                            "(for a value the op supplies at run time)");
    if (!p.expr.empty())
      for (const std::string& id : expr_identifiers(p.expr, fmt::format("{}:{}: {}", r.file(), p.line, path)))
        if (!known.count(id))
          r.fail(vf.line, SpecReader::join(path, "expr"), fmt::format("'{}' is not an axis or enum value", id));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::vector<std::string>> parse_together(const SpecReader& r, const YAML::Node& n) {
  std::vector<std::vector<std::string>> out;
  const std::vector<YAML::Node> items = r.list(n, "together", false);
  for (size_t i = 0; i < items.size(); ++i) {
    out.push_back(r.scalar_list(items[i], SpecReader::index("together", i), false));
    if (out.back().size() < 2) r.fail(items[i], SpecReader::index("together", i), "a group needs two or more arguments");
  }
  return out;
}

bool layout_mentions(const Layout& l, int symbol) {
  return std::any_of(l.dims.begin(), l.dims.end(), [&](const LayoutDim& d) { return d.symbol == symbol; });
}

// Cross-references: names that must exist, outputs whose symbols the inputs bind.
void check_references(const SpecReader& r, const ArgSections& a, const std::vector<AxisDef>& axes,
                      bool internal) {
  auto is_arg = [&](const std::string& n) {
    return std::any_of(a.tensors.begin(), a.tensors.end(), [&](const TensorArgDef& t) { return t.name == n; }) ||
           std::any_of(a.scalars.begin(), a.scalars.end(), [&](const ScalarArgDef& s) { return s.name == n; });
  };
  std::set<std::string> names;
  for (const TensorArgDef& t : a.tensors)
    if (!names.insert(t.name).second) r.fail(t.line, "tensors", fmt::format("duplicate tensor '{}'", t.name));
  for (const ScalarArgDef& s : a.scalars)
    if (!names.insert(s.name).second) r.fail(s.line, "scalars", fmt::format("'{}' is also a tensor", s.name));
  for (const ModeDef& m : a.modes) {
    for (const std::string& n : m.requires_args) if (!is_arg(n)) r.fail(m.line, "modes." + m.name, fmt::format("requires unknown argument '{}'", n));
    for (const std::string& n : m.forbids_args) if (!is_arg(n)) r.fail(m.line, "modes." + m.name, fmt::format("forbids unknown argument '{}'", n));
    auto w = std::find_if(a.tensors.begin(), a.tensors.end(), [&](const TensorArgDef& t) { return t.name == m.when; });
    if (w == a.tensors.end() || !w->optional || w->output)
      r.fail(m.line, "modes." + m.name + ".when", fmt::format("'{}' is not an optional input tensor", m.when));
  }
  for (const auto& g : a.together)
    for (const std::string& n : g) if (!is_arg(n)) r.fail(1, "together", fmt::format("unknown argument '{}'", n));
  for (const TensorArgDef& t : a.tensors) {
    if (!t.like.empty()) {
      auto src = std::find_if(a.tensors.begin(), a.tensors.end(), [&](const TensorArgDef& u) { return u.name == t.like; });
      // An optional output may take an optional input's shape (0-d when that input is absent).
      if (src == a.tensors.end() || src->output || (src->optional && !t.optional))
        r.fail(t.line, "tensors." + t.name + ".like",
               fmt::format("'{}' is not a required input tensor{}", t.like, t.optional ? " or an optional one" : ""));
    }
    for (const std::string& n : t.in_place) {
      auto src = std::find_if(a.tensors.begin(), a.tensors.end(), [&](const TensorArgDef& u) { return u.name == n; });
      if (src == a.tensors.end() || src->output)
        r.fail(t.line, "tensors." + t.name + ".in_place", fmt::format("'{}' is not an input tensor", n));
    }
    if (!t.output || internal) continue;
    // Every symbol of an output must be bound by some input layout: outputs can then be allocated.
    std::vector<const Layout*> layouts{&t.layout};
    for (const auto& [mode, l] : t.mode_layouts) layouts.push_back(&l);
    for (const Layout* l : layouts)
      for (const LayoutDim& d : l->dims) {
        if (d.kind != LayoutDim::Kind::Symbol) continue;
        bool bound = std::any_of(a.scalars.begin(), a.scalars.end(), [&](const ScalarArgDef& s) { return s.binds == d.symbol; });
        for (const TensorArgDef& in : a.tensors) {
          if (in.output) continue;
          bound = bound || layout_mentions(in.layout, d.symbol);
          for (const auto& [mode, il] : in.mode_layouts) bound = bound || layout_mentions(il, d.symbol);
        }
        if (!bound)
          r.fail(t.line, "tensors." + t.name,
                 fmt::format("output dim '{}' is not the size of any input's dim", a.symbols[d.symbol]));
      }
  }
  for (const AxisDef& ax : axes)
    if (!ax.from.empty() && std::find(a.symbols.begin(), a.symbols.end(), ax.from) == a.symbols.end())
      r.fail(ax.line, "axes." + ax.name + ".from", fmt::format("'{}' is not a size symbol of any layout", ax.from));
}

}  // namespace

ArgSections parse_arg_sections(const SpecReader& r, const Fields& top, const std::vector<AxisDef>& axes,
                               const std::map<std::string, int64_t>& enum_constants, bool internal) {
  ArgSections a;
  if (const YAML::Node* n = top.find("modes")) a.modes = parse_modes(r, *n);
  const std::vector<YAML::Node> items = r.list(*top.find("tensors"), "tensors", false);
  for (size_t i = 0; i < items.size(); ++i)
    a.tensors.push_back(parse_tensor(r, items[i], SpecReader::index("tensors", i), a, axes, a.symbols));
  if (const YAML::Node* n = top.find("scalars")) a.scalars = parse_scalars(r, *n, axes, a.symbols);
  if (const YAML::Node* n = top.find("together")) a.together = parse_together(r, *n);
  if (const YAML::Node* n = top.find("problem")) a.problem = parse_problem(r, *n, axes, enum_constants);
  check_references(r, a, axes, internal);
  // Kernels write an output shaped like a whole-contiguous input as they read that input.
  for (TensorArgDef& t : a.tensors)
    for (const TensorArgDef& src : a.tensors)
      if (!t.like.empty() && src.name == t.like) t.contiguous = t.contiguous || src.contiguous;
  return a;
}

}  // namespace ejk::detail

namespace ejk {

int Layout::required_rank() const {
  return static_cast<int>(std::count_if(dims.begin(), dims.end(), [](const LayoutDim& d) {
    return !d.optional && d.kind != LayoutDim::Kind::Ellipsis;
  }));
}

bool Layout::has_ellipsis() const {
  return !dims.empty() && dims.front().kind == LayoutDim::Kind::Ellipsis;
}

bool ScalarArgDef::default_is_absent() const {
  if (default_value == "none") return true;
  switch (type) {
    case ScalarType::boolean: return default_value != "true" && default_value != "false";
    case ScalarType::i64: return default_value.empty() || default_value.find_first_not_of("-0123456789") != std::string::npos;
    case ScalarType::f32:
    case ScalarType::f64: {
      double v = 0;
      return !detail::parse_number(default_value, v);
    }
    case ScalarType::i64x2: return true;
  }
  return true;
}

const Layout& TensorArgDef::layout_in(const std::string& mode) const {
  if (mode.empty()) return layout;
  auto it = mode_layouts.find(mode);
  return it == mode_layouts.end() ? layout : it->second;
}

}  // namespace ejk
