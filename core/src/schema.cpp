// OpSchema's key operations: building, parsing, validating and expanding variant keys, the
// heuristic, and template values. Parsing the spec itself is in schema_parse.cpp.
#include "ejk/core/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "schema_internal.h"

namespace ejk {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.emplace_back(s.substr(start, end == std::string_view::npos ? s.npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::string target_names(const BackendDef& b) {
  std::string s;
  for (const TargetDef& t : b.targets) s += fmt::format("{}{}", s.empty() ? "" : ", ", t.name);
  return s;
}

const TargetDef& require_target(const BackendDef& b, std::string_view target) {
  const TargetDef* t = b.find_target(target);
  if (!t)
    throw InvalidArgument(fmt::format("target '{}' is not a target of backend '{}' (expected one of: {})",
                                      target, b.name, target_names(b)));
  return *t;
}

// The digits after an int axis prefix, canonical only: no sign, no leading zero.
bool parse_int_token(std::string_view digits, int64_t& out) {
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return false;
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return ec == std::errc() && end == digits.data() + digits.size();
}

AxisValue blank_value(const AxisDef& a) {
  AxisValue v;
  v.name = a.name;
  v.kind = a.kind;
  v.token = a.token;
  if (a.kind == AxisKind::Int) v.int_value = a.int_values.front();
  if (a.kind == AxisKind::Enum) v.enum_value = a.enum_values.front();
  return v;
}

}  // namespace

const TargetDef* BackendDef::find_target(std::string_view target) const {
  for (const TargetDef& t : targets)
    if (t.name == target) return &t;
  return nullptr;
}

const AxisDef& BackendDef::axis(std::string_view n) const {
  for (const AxisDef& a : axes)
    if (a.name == n) return a;
  throw InvalidArgument(fmt::format("backend '{}' has no axis named '{}'", name, n));
}

const BackendDef& OpSchema::backend(std::string_view name) const {
  for (const BackendDef& b : backends_)
    if (b.name == name) return b;
  std::string known;
  for (const BackendDef& b : backends_) known += fmt::format("{}{}", known.empty() ? "" : ", ", b.name);
  throw InvalidArgument(fmt::format("op '{}' ({}): backend '{}' is not in the spec (expected one of: {})",
                                    op_, file_, name, known));
}

bool OpSchema::has_backend(std::string_view name) const {
  return std::any_of(backends_.begin(), backends_.end(), [&](const BackendDef& b) { return b.name == name; });
}

int OpSchema::tensor_index(std::string_view name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

int OpSchema::scalar_index(std::string_view name) const {
  for (size_t i = 0; i < scalars_.size(); ++i)
    if (scalars_[i].name == name) return static_cast<int>(i);
  return -1;
}

const AxisDef& OpSchema::axis(std::string_view name) const {
  for (const AxisDef& a : axes_)
    if (a.name == name) return a;
  throw InvalidArgument(fmt::format("op '{}': no axis named '{}'", op_, name));
}

int64_t OpSchema::enum_index(std::string_view axis_name, std::string_view value) const {
  const AxisDef& a = axis(axis_name);
  auto it = std::find(a.enum_values.begin(), a.enum_values.end(), value);
  if (a.kind != AxisKind::Enum || it == a.enum_values.end())
    throw InvalidArgument(fmt::format("op '{}': '{}' is not a value of enum axis '{}' (expected one of: {})",
                                      op_, value, axis_name, detail::describe_domain(a)));
  return it - a.enum_values.begin();
}

VariantKey OpSchema::blank_key(std::string_view backend_name, std::string_view target) const {
  const BackendDef& b = backend(backend_name);
  require_target(b, target);
  VariantKey k;
  k.op = op_;
  k.backend = b.name;
  k.target = std::string(target);
  for (const AxisDef& a : b.axes) k.axes.push_back(blank_value(a));
  return k;
}

VariantKey OpSchema::parse_key(std::string_view text) const {
  const std::vector<std::string> toks = split(text, '.');
  auto fail = [&](const std::string& what) -> InvalidArgument {
    return InvalidArgument(fmt::format("variant key '{}': {}", text, what));
  };
  if (toks.size() < 3) throw fail("expected <op>.<backend>.<target>.<axis tokens...>");
  if (toks[0] != op_) throw fail(fmt::format("op '{}' is not '{}'", toks[0], op_));
  if (!has_backend(toks[1])) throw fail(fmt::format("backend '{}' is not in the spec", toks[1]));
  const BackendDef& b = backend(toks[1]);
  if (!b.find_target(toks[2]))
    throw fail(fmt::format("target '{}' is not one of: {}", toks[2], target_names(b)));
  VariantKey k = blank_key(toks[1], toks[2]);
  size_t i = 3;
  for (AxisValue& v : k.axes) {
    const AxisDef& a = axis(v.name);
    const bool more = i < toks.size();
    if (a.kind == AxisKind::Flag) {
      v.flag_value = more && toks[i] == a.token;
      i += v.flag_value ? 1 : 0;
      continue;
    }
    if (!more) throw fail(fmt::format("ends before axis '{}'", a.name));
    const std::string& t = toks[i++];
    if (a.kind == AxisKind::Enum) {
      if (std::find(a.enum_values.begin(), a.enum_values.end(), t) == a.enum_values.end())
        throw fail(fmt::format("token '{}' is not a value of axis '{}' (expected one of: {})", t,
                               a.name, detail::describe_domain(a)));
      v.enum_value = t;
    } else if (t.rfind(a.token, 0) != 0 || !parse_int_token(std::string_view(t).substr(a.token.size()), v.int_value)) {
      throw fail(fmt::format("token '{}' is not '{}' followed by a number (axis '{}')", t, a.token, a.name));
    }
  }
  if (i < toks.size())
    throw fail(fmt::format("unexpected token '{}' (flags go in the spec's axis order)", toks[i]));
  return k;
}

std::map<std::string, int64_t> OpSchema::constraint_vars(const VariantKey& key) const {
  std::map<std::string, int64_t> vars = enum_constants_;
  for (const AxisValue& v : key.axes) {
    switch (v.kind) {
      case AxisKind::Int: vars[v.name] = v.int_value; break;
      case AxisKind::Flag: vars[v.name] = v.flag_value ? 1 : 0; break;
      case AxisKind::Enum: vars[v.name] = enum_index(v.name, v.enum_value); break;
    }
  }
  if (const TargetDef* t = has_backend(key.backend) ? backend(key.backend).find_target(key.target) : nullptr)
    for (const auto& [name, value] : t->vars) vars[name] = value;
  return vars;
}

void OpSchema::validate(const VariantKey& key) const {
  const std::string ks = to_string(key);
  auto fail = [&](const std::string& what) -> InvalidArgument {
    return InvalidArgument(fmt::format("variant key '{}': {}", ks, what));
  };
  if (key.op != op_) throw fail(fmt::format("op '{}' is not '{}'", key.op, op_));
  const BackendDef& b = backend(key.backend);
  require_target(b, key.target);
  if (key.axes.size() != b.axes.size())
    throw fail(fmt::format("has {} axes, the spec has {}", key.axes.size(), b.axes.size()));
  for (size_t i = 0; i < b.axes.size(); ++i) {
    const AxisDef& a = b.axes[i];
    const AxisValue& v = key.axes[i];
    if (v.name != a.name || v.kind != a.kind || v.token != a.token)
      throw fail(fmt::format("axis {} is '{}', the spec expects '{}' here", i, v.name, a.name));
    const bool in_domain =
        a.kind == AxisKind::Flag ||
        (a.kind == AxisKind::Int && detail::int_in_domain(a, v.int_value)) ||
        (a.kind == AxisKind::Enum &&
         std::find(a.enum_values.begin(), a.enum_values.end(), v.enum_value) != a.enum_values.end());
    if (!in_domain)
      throw fail(fmt::format("{} = {} is outside the {} domain ({})", a.name,
                             a.kind == AxisKind::Int ? std::to_string(v.int_value) : v.enum_value,
                             b.name, detail::describe_domain(a)));
  }
  const std::map<std::string, int64_t> vars = constraint_vars(key);
  for (size_t i = 0; i < b.constraints.size(); ++i) {
    const std::string where = fmt::format("{}:{}: backends.{}.constraints[{}]", file_,
                                          b.constraint_lines[i], b.name, i);
    if (eval_expr(b.constraints[i], vars, where) == 0)
      throw fail(fmt::format("violates constraint '{}' ({})", b.constraints[i], where));
  }
}

std::vector<VariantKey> OpSchema::expand_aot_set(const BackendDef& b, size_t set) const {
  const auto& values = b.aot.at(set);
  std::vector<VariantKey> keys;
  for (const std::string& target : values.at("target")) keys.push_back(blank_key(b.name, target));
  for (const AxisDef& a : b.axes) {
    auto it = values.find(a.name);
    if (it == values.end()) continue;  // a flag left at off
    std::vector<VariantKey> next;
    for (const VariantKey& k : keys)
      for (const std::string& v : it->second) {
        VariantKey n = k;
        if (a.kind == AxisKind::Int) n.set_int(a.name, std::stoll(v));
        if (a.kind == AxisKind::Enum) n.set_enum(a.name, v);
        if (a.kind == AxisKind::Flag) n.set_flag(a.name, v == "true");
        next.push_back(std::move(n));
      }
    keys = std::move(next);
  }
  for (const VariantKey& k : keys) validate(k);
  return keys;
}

void OpSchema::check_aot_sets() const {
  for (const BackendDef& b : backends_)
    for (size_t i = 0; i < b.aot.size(); ++i) {
      try {
        expand_aot_set(b, i);
      } catch (const InvalidArgument& e) {
        throw SpecError(fmt::format("{}:{}: backends.{}.aot[{}]: names a key the spec rejects: {}",
                                    file_, b.aot_lines[i], b.name, i, e.what()));
      }
    }
}

std::vector<VariantKey> OpSchema::aot_keys(std::string_view backend_name) const {
  const BackendDef& b = backend(backend_name);
  std::vector<std::pair<std::string, VariantKey>> named;
  for (size_t i = 0; i < b.aot.size(); ++i)
    for (VariantKey& k : expand_aot_set(b, i)) named.emplace_back(to_string(k), std::move(k));
  std::sort(named.begin(), named.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  named.erase(std::unique(named.begin(), named.end(),
                          [](const auto& x, const auto& y) { return x.first == y.first; }),
              named.end());
  std::vector<VariantKey> out;
  for (auto& [s, k] : named) out.push_back(std::move(k));
  return out;
}

std::map<std::string, int64_t> OpSchema::choose_config(
    std::string_view backend_name, const std::map<std::string, int64_t>& problem) const {
  const BackendDef& b = backend(backend_name);
  std::map<std::string, int64_t> vars = enum_constants_;
  for (const auto& [name, value] : problem) vars[name] = value;
  for (const HeuristicRule& rule : b.heuristic) {
    const std::string where = fmt::format("{}:{}: backends.{}.heuristic", file_, rule.line, b.name);
    for (const std::string& id : expr_identifiers(rule.when, where))
      if (!vars.count(id))
        throw InvalidArgument(fmt::format(
            "choose_config({}): problem has no '{}', which the rule at {} uses (a target var "
            "needs the overload that takes a target)",
            b.name, id, where));
    if (eval_expr(rule.when, vars, where) != 0) return rule.choose;
  }
  // No heuristic: the first candidate config, or nothing (the blank key's values).
  return b.configs.empty() ? std::map<std::string, int64_t>{} : b.configs.front();
}

std::map<std::string, int64_t> OpSchema::choose_config(
    std::string_view backend_name, std::string_view target,
    const std::map<std::string, int64_t>& problem) const {
  std::map<std::string, int64_t> vars = require_target(backend(backend_name), target).vars;
  for (const auto& [name, value] : problem) vars[name] = value;
  return choose_config(backend_name, vars);
}

std::map<std::string, std::string> OpSchema::template_vars(const VariantKey& key) const {
  std::map<std::string, std::string> vars = {
      {"key", to_string(key)},   {"symbol", symbol_name(key)}, {"op", key.op},
      {"backend", key.backend}, {"target", key.target}};
  for (const AxisValue& v : key.axes) {
    switch (v.kind) {
      case AxisKind::Int: vars[v.name] = std::to_string(v.int_value); break;
      case AxisKind::Enum: vars[v.name] = v.enum_value; break;
      case AxisKind::Flag: vars[v.name] = v.flag_value ? "true" : "false"; break;
    }
  }
  return vars;
}

}  // namespace ejk
