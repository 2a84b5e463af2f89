#include "engine/op_def.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "ejk/core/error.h"
#include "registry.h"

namespace ejk::engine {
namespace {

[[noreturn]] void missing(const OpDef& op, const char* what, std::string_view name) {
  throw std::logic_error(fmt::format("op {}: its code names {} '{}', which {} does not declare", op.name(), what,
                                     name, op.schema().file()));
}

std::optional<int64_t> parse_i64(std::string_view t) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size() || t.empty()) return std::nullopt;
  return v;
}

// A spec default that is a literal of the scalar's type; none and formulas ("1/sqrt(D)") give
// monostate, which the typed accessors report.
Scalar literal_default(const ScalarArgDef& d) {
  const std::string& t = d.default_value;
  switch (d.type) {
    case ScalarType::boolean:
      if (t == "true") return true;
      if (t == "false") return false;
      break;
    case ScalarType::i64:
      if (auto v = parse_i64(t)) return *v;
      break;
    case ScalarType::f32:
    case ScalarType::f64: {
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size()) return v;
      break;
    }
    case ScalarType::i64x2: {
      // "[l, r]"
      if (t.size() < 2 || t.front() != '[' || t.back() != ']') break;
      const std::string_view in(t.data() + 1, t.size() - 2);
      const size_t comma = in.find(',');
      if (comma == std::string_view::npos) break;
      auto trim = [](std::string_view x) {
        while (!x.empty() && x.front() == ' ') x.remove_prefix(1);
        while (!x.empty() && x.back() == ' ') x.remove_suffix(1);
        return x;
      };
      auto l = parse_i64(trim(in.substr(0, comma))), r = parse_i64(trim(in.substr(comma + 1)));
      if (l && r) return std::array<int64_t, 2>{*l, *r};
      break;
    }
  }
  return std::monostate{};
}

struct OpRegistry {
  std::mutex mu;
  std::vector<const OpDef& (*)()> accessors;
};

OpRegistry& registry() {
  static OpRegistry r;
  return r;
}

}  // namespace

OpDef::OpDef(std::string_view kernel_op) : schema_(&detail::op_schema(kernel_op)) {
  // A call's argument pack and bound sizes are fixed arrays: a spec past them is refused here.
  auto fits = [&](const char* what, size_t n, int max) {
    if (n > size_t(max))
      throw std::logic_error(fmt::format("op {}: {} declares {} {}, the engine holds at most {}", name(),
                                         schema_->file(), n, what, max));
  };
  fits("tensors", schema_->tensors().size(), kMaxTensors);
  fits("scalars", schema_->scalars().size(), kMaxScalars);
  fits("size symbols", schema_->symbols().size(), kMaxSymbols);
  fits("axes", schema_->axes().size(), kMaxAxes);
  fits("problem variables", schema_->problem_vars().size(), kMaxProblem);
  for (const ScalarArgDef& d : schema_->scalars()) defaults_.push_back(literal_default(d));
}

void OpDef::cuda_launch(const Bound&, const PlanData&, CudaLaunchContext&) const {
#if EJK_HAVE_CUDA
  throw BackendUnavailable(fmt::format("{}: this op has no CUDA kernels", name()));
#else
  throw BackendUnavailable(
      fmt::format("{}: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)", name()));
#endif
}

namespace {

// The scalar as given, else its literal default; logic_error when neither exists.
const Scalar& value_or_default(const Bound& b, int s) {
  const Scalar& v = b.scalar(s);
  if (!std::holds_alternative<std::monostate>(v)) return v;
  const Scalar& d = b.op->scalar_default(s);
  if (std::holds_alternative<std::monostate>(d))
    throw std::logic_error(fmt::format("op {}: scalar '{}' is absent and its spec default '{}' is not a literal",
                                       b.op->name(), b.op->schema().scalars()[size_t(s)].name,
                                       b.op->schema().scalars()[size_t(s)].default_value));
  return d;
}

}  // namespace

double Bound::f64(int s) const {
  const Scalar& v = value_or_default(*this, s);
  return std::holds_alternative<int64_t>(v) ? double(std::get<int64_t>(v)) : std::get<double>(v);
}

int64_t Bound::i64(int s) const { return std::get<int64_t>(value_or_default(*this, s)); }

bool Bound::flag(int s) const { return std::get<bool>(value_or_default(*this, s)); }

std::array<int64_t, 2> Bound::pair(int s) const {
  const Scalar& v = value_or_default(*this, s);
  if (std::holds_alternative<int64_t>(v)) return {std::get<int64_t>(v), std::get<int64_t>(v)};
  return std::get<std::array<int64_t, 2>>(v);
}

int OpDef::tensor(std::string_view name) const {
  const int i = schema_->tensor_index(name);
  if (i < 0) missing(*this, "tensor", name);
  return i;
}

int OpDef::scalar(std::string_view name) const {
  const int i = schema_->scalar_index(name);
  if (i < 0) missing(*this, "scalar", name);
  return i;
}

int OpDef::symbol(std::string_view name) const {
  const auto& s = schema_->symbols();
  auto it = std::find(s.begin(), s.end(), name);
  if (it == s.end()) missing(*this, "size symbol", name);
  return static_cast<int>(it - s.begin());
}

int OpDef::axis(std::string_view name) const {
  const auto& a = schema_->axes();
  auto it = std::find_if(a.begin(), a.end(), [&](const AxisDef& x) { return x.name == name; });
  if (it == a.end()) throw InvalidArgument(fmt::format("{}: no axis named '{}'", this->name(), name));
  return static_cast<int>(it - a.begin());
}

int OpDef::problem_var(std::string_view name) const {
  const auto& p = schema_->problem_vars();
  auto it = std::find_if(p.begin(), p.end(), [&](const ProblemVarDef& x) { return x.name == name; });
  if (it == p.end()) missing(*this, "problem variable", name);
  return static_cast<int>(it - p.begin());
}

OpRegistrar::OpRegistrar(const OpDef& (*get)()) {
  OpRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.accessors.push_back(get);
}

const std::vector<const OpDef*>& all_ops() {
  static const std::vector<const OpDef*> ops = [] {
    OpRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    std::vector<const OpDef*> v;
    for (auto get : r.accessors) v.push_back(&get());
    std::sort(v.begin(), v.end(), [](const OpDef* a, const OpDef* b) { return a->name() < b->name(); });
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i]->name() == v[i - 1]->name())
        throw std::logic_error(fmt::format("op {} is registered twice", v[i]->name()));
    return v;
  }();
  return ops;
}

const OpDef& find_op(std::string_view api_name) {
  for (const OpDef* op : all_ops())
    if (op->name() == api_name) return *op;
  std::string known;
  for (const OpDef* op : all_ops()) known += (known.empty() ? "" : ", ") + op->name();
  throw InvalidArgument(fmt::format("op '{}' is not in this build (ops: {})", api_name, known));
}

}  // namespace ejk::engine
