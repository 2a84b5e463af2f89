#include "engine/bind.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ejk/core/error.h"
#include "engine/call.h"

namespace ejk::engine {
namespace {

// The bytes [lo, hi) a tensor's elements lie in; empty for a tensor without elements.
struct Extent {
  uintptr_t lo = 0, hi = 0;
};

Extent extent_of(const TensorView& v) {
  int64_t last = 0;  // check_memory has ruled out overflow
  for (int64_t i = 0; i < v.rank(); ++i) {
    if (v.shape[i] == 0) return {};
    last += (v.shape[i] - 1) * v.strides[i];
  }
  const auto lo = reinterpret_cast<uintptr_t>(v.data);
  return {lo, lo + uintptr_t(last + 1) * dtype_size(v.dtype)};
}

// Whether no two elements share an address: each dim, taken by increasing stride, must step over
// everything the smaller ones reach. Sufficient, and true of every layout frameworks produce.
bool elements_distinct(const TensorView& v) {
  std::array<std::pair<int64_t, int64_t>, Dims::kMaxRank> dims{};  // (stride, size) of dims with size > 1
  size_t n = 0;
  for (int64_t i = 0; i < v.rank(); ++i) {
    if (v.shape[i] == 0) return true;
    if (v.shape[i] > 1) dims[n++] = {v.strides[i], v.shape[i]};
  }
  std::sort(dims.begin(), dims.begin() + n);
  int64_t reach = 1;  // elements spanned by the dims so far
  for (size_t i = 0; i < n; ++i) {
    if (dims[i].first < reach) return false;
    reach += dims[i].first * (dims[i].second - 1);
  }
  return true;
}

bool same_view(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.shape == b.shape && a.strides == b.strides;
}

struct Binder {
  const OpDef& op;
  const OpSchema& s;
  Bound b;
  int8_t bound_by[kMaxSymbols];  // tensor that first gave each symbol its size
  int lead_from = -1;

  [[noreturn]] void fail(std::string_view arg, const std::string& what) const {
    throw InvalidArgument(fmt::format("{}: {}: {}", op.name(), arg, what));
  }
  const TensorArgDef& def(int t) const { return s.tensors()[t]; }
  std::string mode_note() const {
    return b.mode < 0 ? "" : fmt::format(" ({} mode)", s.modes()[b.mode].name);
  }

  void choose_mode() {
    for (size_t m = 0; m < s.modes().size(); ++m)
      if (b.has(s.tensor_index(s.modes()[m].when))) {
        b.mode = static_cast<int>(m);
        return;
      }
  }

  bool given(const std::string& name) const {
    if (int t = s.tensor_index(name); t >= 0) return b.has(t);
    int i = s.scalar_index(name);
    return i >= 0 && !std::holds_alternative<std::monostate>(b.scalar(i));
  }

  void check_presence() {
    if (b.mode >= 0) {
      const ModeDef& m = s.modes()[b.mode];
      for (const std::string& n : m.requires_args)
        if (!given(n)) fail(n, fmt::format("required when {} is given ({} mode)", m.when, m.name));
      for (const std::string& n : m.forbids_args)
        if (given(n)) fail(n, fmt::format("not supported with {} ({} mode)", m.when, m.name));
    }
    for (const auto& group : s.together()) {
      const bool any = std::any_of(group.begin(), group.end(), [&](const std::string& n) { return given(n); });
      for (const std::string& n : group)
        if (any && !given(n)) fail(n, fmt::format("{} are given together", fmt::join(group, " and ")));
    }
    for (size_t t = 0; t < s.tensors().size(); ++t) {
      const TensorArgDef& d = def(int(t));
      const bool may_skip = d.optional || (d.output && b.args->outputs_optional);
      if (!b.has(int(t)) && !may_skip) fail(d.name, d.output ? "required (an output to write)" : "required");
    }
  }

  bool is_enum_axis(const std::string& name) const {
    for (const AxisDef& a : s.axes())
      if (a.name == name) return a.kind == AxisKind::Enum;
    return false;
  }

  // A tensor's dtype: one of its listed dtypes, or the dtype axis's value, which every tensor
  // that names the axis shares.
  void check_dtype(int t, int& dtype_from) {
    const TensorView& v = b.tensor(t);
    const TensorArgDef& d = def(t);
    for (const std::string& name : d.dtypes) {
      if (!is_enum_axis(name)) {
        if (parse_dtype(name) == v.dtype) return;
        continue;
      }
      if (dtype_from >= 0) {
        if (v.dtype != b.dtype)
          fail(d.name, fmt::format("expected dtype {} (as {}), got {}", dtype_name(b.dtype), def(dtype_from).name,
                                   dtype_name(v.dtype)));
        return;
      }
      const auto& values = s.axis(name).enum_values;
      if (std::find(values.begin(), values.end(), dtype_name(v.dtype)) == values.end())
        fail(d.name, fmt::format("expected dtype {}, got {}", fmt::join(values, ", "), dtype_name(v.dtype)));
      b.dtype = v.dtype;
      dtype_from = t;
      return;
    }
    fail(d.name, fmt::format("expected dtype {}, got {}", fmt::join(d.dtypes, " or "), dtype_name(v.dtype)));
  }

  std::string sym_name(int sym) const { return s.symbols()[sym]; }

  void unify(int t, int axis, const LayoutDim& d, int64_t size) {
    const TensorView& v = b.tensor(t);
    if (d.kind == LayoutDim::Kind::Literal) {
      if (size != d.value)
        fail(def(t).name, fmt::format("dim {} must be {}, got {} (shape {})", axis, d.value, size, to_string(v.shape)));
      return;
    }
    if (d.broadcast && size == 1) return;
    const int64_t value = size - d.value;
    if (value < 0)
      fail(def(t).name, fmt::format("dim {} ({}) must be at least {}, got {}", axis, sym_name(d.symbol), d.value, size));
    if (!b.known(d.symbol)) {
      b.sizes[d.symbol] = value;
      b.sizes_known |= 1u << d.symbol;
      bound_by[d.symbol] = int8_t(t);
      return;
    }
    if (b.sizes[d.symbol] != value)
      fail(def(t).name, fmt::format("dim {} ({}{}) must be {} as in {}, got {} (shape {})", axis, sym_name(d.symbol),
                                    d.value ? fmt::format("+{}", d.value) : "", b.sizes[d.symbol] + d.value,
                                    bound_by[d.symbol] < 0 ? "the scalar that gives it" : def(bound_by[d.symbol]).name, size,
                                    to_string(v.shape)));
  }

  void check_layout(int t) {
    const TensorView& v = b.tensor(t);
    const TensorArgDef& d = def(t);
    if (!d.like.empty()) {
      // Like an absent optional input: a 0-d placeholder.
      static const TensorView absent_view{};
      const TensorView& src = b.has(s.tensor_index(d.like)) ? b.tensor(s.tensor_index(d.like)) : absent_view;
      if (!(v.shape == src.shape))
        fail(d.name, fmt::format("expected shape {} ({}'s), got {}", to_string(src.shape), d.like, to_string(v.shape)));
      b.absent[t] = b.absent[s.tensor_index(d.like)];
      return;
    }
    const Layout& l = d.layout_in(b.mode < 0 ? std::string() : s.modes()[b.mode].name);
    const int required = l.required_rank();
    const int optional = static_cast<int>(l.dims.size()) - required - (l.has_ellipsis() ? 1 : 0);
    const int rank = static_cast<int>(v.rank());
    if (rank < required || (!l.has_ellipsis() && rank > required + optional))
      fail(d.name, fmt::format("expected {}{} {}{}, got shape {}", l.has_ellipsis() ? "rank >= " : "rank ",
                               optional ? fmt::format("{}..{}", required, required + optional) : std::to_string(required),
                               l.text, mode_note(), to_string(v.shape)));
    int axis = 0;
    size_t first = 0;
    if (l.has_ellipsis()) {
      Dims lead(v.shape.data(), rank - required);
      if (lead_from >= 0 && !(lead == b.lead))
        fail(d.name, fmt::format("leading dims {} must match {}'s {}", to_string(lead), def(lead_from).name, to_string(b.lead)));
      b.lead = lead, lead_from = t;
      axis = rank - required, first = 1;
    } else {
      b.absent[t] = int8_t(required + optional - rank);
    }
    for (size_t i = first; i < l.dims.size(); ++i) {
      if (l.dims[i].optional && int(i) < b.absent[t]) continue;
      unify(t, axis, l.dims[i], v.shape[axis]);
      ++axis;
    }
  }

  void check_memory(int t) {
    const TensorView& v = b.tensor(t);
    const TensorArgDef& d = def(t);
    if (v.strides.size() != v.shape.size())
      fail(d.name, fmt::format("has {} strides for {} dims", v.strides.size(), v.shape.size()));
    int64_t last = 0, numel = 1;  // offset of the last element; elements
    for (int64_t i = 0; i < v.rank(); ++i) {
      if (v.strides[i] < 0) fail(d.name, fmt::format("strides must be >= 0, got {}", to_string(v.strides)));
      int64_t span = 0;
      if (v.shape[i] == 0) numel = 0;
      if (__builtin_mul_overflow(v.shape[i] > 0 ? v.shape[i] - 1 : 0, v.strides[i], &span) ||
          __builtin_add_overflow(last, span, &last) || __builtin_mul_overflow(numel, v.shape[i], &numel))
        fail(d.name, fmt::format("shape {} with strides {} spans more than 2^63 elements", to_string(v.shape),
                                 to_string(v.strides)));
    }
    if (int64_t bytes = 0; __builtin_mul_overflow(last + 1, int64_t(dtype_size(v.dtype)), &bytes))
      fail(d.name, fmt::format("shape {} spans more than 2^63 bytes", to_string(v.shape)));
    if (d.contiguous ? !v.is_contiguous() : (v.rank() > 0 && v.shape.back() > 1 && v.strides.back() != 1))
      fail(d.name, d.contiguous ? fmt::format("must be contiguous, got strides {}", to_string(v.strides))
                                : fmt::format("the last dim must be contiguous (stride 1), got stride {}", v.strides.back()));
    if (v.data == nullptr && numel > 0 && !b.args->shapes_only) fail(d.name, "data pointer is null");
  }

  void bind_tensors() {
    int dtype_from = -1, device_from = -1;
    // Inputs first: they bind the symbols that outputs are checked against.
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < s.tensors().size(); ++i) {
        const int t = static_cast<int>(i);
        if (!b.has(t) || def(t).output != (pass == 1)) continue;
        const TensorView& v = b.tensor(t);
        if (device_from < 0) b.device = v.device, device_from = t;
        else if (!(v.device == b.device))
          fail(def(t).name, fmt::format("expected a tensor on {} (where {} is), got {}", to_string(b.device),
                                        def(device_from).name, to_string(v.device)));
        check_dtype(t, dtype_from);
        check_layout(t);
        check_memory(t);
        if (!def(t).sets_flag.empty()) b.flags |= 1u << op.axis(def(t).sets_flag);
      }
  }

  // Kernels write outputs while they read inputs: an output whose elements share memory, or that
  // overlaps another argument, would race. The one exception is the input the spec lets an output
  // be (in_place), and then only as exactly the same view.
  void check_overlaps() const {
    for (size_t i = 0; i < s.tensors().size(); ++i) {
      const int t = static_cast<int>(i);
      if (!b.has(t) || !def(t).output) continue;
      const TensorView& v = b.tensor(t);
      if (!elements_distinct(v))
        fail(def(t).name, fmt::format("shape {} with strides {}: an output's elements must not share memory",
                                      to_string(v.shape), to_string(v.strides)));
      const Extent e = extent_of(v);
      if (e.lo == e.hi || b.args->shapes_only) continue;
      for (size_t j = 0; j < s.tensors().size(); ++j) {
        const int u = static_cast<int>(j);
        if (u == t || !b.has(u)) continue;
        const Extent f = extent_of(b.tensor(u));
        if (f.lo == f.hi || f.hi <= e.lo || e.hi <= f.lo) continue;
        const std::vector<std::string>& may_be = def(t).in_place;
        if (std::find(may_be.begin(), may_be.end(), def(u).name) != may_be.end() && same_view(v, b.tensor(u))) continue;
        const std::string allowed = may_be.empty() ? ""
            : fmt::format(" (it may be {} itself: the same pointer, shape and strides)", fmt::join(may_be, " or "));
        fail(def(t).name, fmt::format("overlaps the memory of {}{}", def(u).name, allowed));
      }
    }
  }

  // One number against the spec's range. f32 scalars are checked as the f32 the kernels get:
  // 1e300 becomes inf and 1e-300 becomes 0 there.
  void check_value(const ScalarArgDef& d, double v, const char* element) const {
    const std::string name = element[0] ? fmt::format("{} ({})", d.name, element) : d.name;
    if (d.type == ScalarType::f32 && std::isfinite(v) && !std::isfinite(float(v)))
      fail(name, fmt::format("{} is outside the f32 range (|x| <= {})", v, std::numeric_limits<float>::max()));
    const double x = d.type == ScalarType::f32 ? double(float(v)) : v;
    const char* as = d.type == ScalarType::f32 && x != v ? " as an f32" : "";
    if ((d.finite || d.has_min || d.has_max || d.positive) && std::isnan(x)) fail(name, "must be a number, got NaN");
    if (d.finite && !std::isfinite(x)) fail(name, fmt::format("must be finite, got {}", v));
    if (d.positive && !(x > 0)) fail(name, fmt::format("must be > 0{}, got {}", as, v));
    if (d.has_min && x < d.min) fail(name, fmt::format("must be >= {}, got {}", d.min, v));
    if (d.has_max && x > d.max) fail(name, fmt::format("must be <= {}, got {}", d.max, v));
  }

  // Integers are compared exactly; the bounds are small integers (the spec checks that).
  void check_int(const ScalarArgDef& d, int64_t v, const char* element) const {
    const std::string name = element[0] ? fmt::format("{} ({})", d.name, element) : d.name;
    if (d.positive && v <= 0) fail(name, fmt::format("must be > 0, got {}", v));
    if (d.has_min && double(v) < d.min) fail(name, fmt::format("must be >= {}, got {}", int64_t(d.min), v));
    if (d.has_max && double(v) > d.max) fail(name, fmt::format("must be <= {}, got {}", int64_t(d.max), v));
  }

  void check_range(const ScalarArgDef& d, const Scalar& v) const {
    if (const auto* x = std::get_if<double>(&v)) return check_value(d, *x, "");
    if (const auto* x = std::get_if<int64_t>(&v)) {
      if (d.type == ScalarType::f32 || d.type == ScalarType::f64) return check_value(d, double(*x), "");
      return check_int(d, *x, "");
    }
    if (const auto* x = std::get_if<std::array<int64_t, 2>>(&v)) {
      const bool named = d.pair_fields.size() == 2;
      check_int(d, (*x)[0], named ? d.pair_fields[0].c_str() : "first");
      check_int(d, (*x)[1], named ? d.pair_fields[1].c_str() : "second");
    }
  }

  void bind_scalars() {
    for (size_t i = 0; i < s.scalars().size(); ++i) {
      const ScalarArgDef& d = s.scalars()[i];
      const Scalar& v = b.scalar(int(i));
      if (std::holds_alternative<std::monostate>(v)) continue;
      bool ok = false, on = true;
      switch (d.type) {
        // A number sets its flag when nonzero (dropout_prob = 0 is no dropout).
        case ScalarType::f32:
        case ScalarType::f64:
          ok = std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
          on = ok && (std::holds_alternative<double>(v) ? std::get<double>(v) != 0 : std::get<int64_t>(v) != 0);
          break;
        case ScalarType::i64: ok = std::holds_alternative<int64_t>(v); break;
        case ScalarType::boolean: ok = std::holds_alternative<bool>(v); on = ok && std::get<bool>(v); break;
        case ScalarType::i64x2: ok = std::holds_alternative<std::array<int64_t, 2>>(v) || std::holds_alternative<int64_t>(v); break;
      }
      if (!ok) fail(d.name, fmt::format("expected a value of type {}", d.type_name));
      check_range(d, v);
      if (on && !d.sets_flag.empty()) b.flags |= 1u << op.axis(d.sets_flag);
      if (d.binds >= 0) {
        if (std::get<int64_t>(v) < 0) fail(d.name, fmt::format("must be >= 0, got {}", std::get<int64_t>(v)));
        b.sizes[d.binds] = std::get<int64_t>(v);
        b.sizes_known |= 1u << d.binds;
        bound_by[d.binds] = -1;
      }
    }
  }
};

}  // namespace

int64_t Bound::dim(int t, int p) const {
  const int axis = p - absent[t];
  return axis < 0 ? 1 : args->tensors[t]->shape[axis];
}

int64_t Bound::stride(int t, int p) const {
  const int axis = p - absent[t];
  return axis < 0 ? 0 : args->tensors[t]->strides[axis];
}

std::string_view Bound::mode_name() const { return mode < 0 ? std::string_view() : op->schema().modes()[mode].name; }

Bound bind(const OpDef& op, const ArgPack& args) {
  Binder bd{op, op.schema(), {}, {}};
  bd.b.op = &op;
  bd.b.args = &args;
  bd.choose_mode();
  bd.check_presence();
  bd.bind_scalars();
  bd.bind_tensors();
  bd.check_overlaps();
  return bd.b;
}

Dims output_shape(const Bound& b, int t) {
  const TensorArgDef& d = b.op->schema().tensors()[t];
  if (!d.like.empty()) {
    const int src = b.op->schema().tensor_index(d.like);
    return b.has(src) ? b.tensor(src).shape : Dims{};  // like an absent optional input: 0-d
  }
  const Layout& l = d.layout_in(std::string(b.mode_name()));
  Dims shape;
  for (const LayoutDim& dim : l.dims) {
    if (dim.kind == LayoutDim::Kind::Ellipsis) {
      for (int64_t x : b.lead) shape.push_back(x);
    } else if (dim.optional) {
      continue;  // outputs leave optional dims out
    } else if (dim.kind == LayoutDim::Kind::Literal) {
      shape.push_back(dim.value);
    } else if (b.known(dim.symbol)) {
      shape.push_back(b.size(dim.symbol) + dim.value);
    } else {
      throw InvalidArgument(fmt::format("{}: {}: its size {} is given by no argument", b.op->name(), d.name,
                                        b.op->schema().symbols()[dim.symbol]));
    }
  }
  return shape;
}

ArgPack pack_args(const OpDef& op, const Args& args) {
  ArgPack p;
  const OpSchema& s = op.schema();
  for (const auto& [name, view] : args.tensors()) {
    const int t = s.tensor_index(name);
    if (t < 0) throw InvalidArgument(fmt::format("{}: no tensor argument named '{}'", op.name(), name));
    p.tensors[t] = &view;
  }
  for (const auto& [name, value] : args.scalars()) {
    const int i = s.scalar_index(name);
    if (i < 0) throw InvalidArgument(fmt::format("{}: no scalar argument named '{}'", op.name(), name));
    p.scalars[i] = value;
  }
  for (const auto& [name, value] : args.tuning()) {
    const int a = op.axis(name);
    if (s.axes()[a].kind != AxisKind::Int || !s.axes()[a].from.empty())
      throw InvalidArgument(fmt::format("{}: '{}' is not a tuning axis (block sizes and the like)", op.name(), name));
    if (value <= 0) throw InvalidArgument(fmt::format("{}: {} must be positive, got {}", op.name(), name, value));
    p.tuning[a] = value;
  }
  return p;
}

Args args_of(const OpDef& op, const ArgPack& pack) {
  Args a;
  const OpSchema& s = op.schema();
  for (size_t t = 0; t < s.tensors().size(); ++t)
    if (pack.tensors[t]) a.set(s.tensors()[t].name, *pack.tensors[t]);
  for (size_t i = 0; i < s.scalars().size(); ++i)
    if (!std::holds_alternative<std::monostate>(pack.scalars[i])) a.set(s.scalars()[i].name, pack.scalars[i]);
  return a;
}

const OpDef& spec_op(std::string_view api, std::initializer_list<std::string_view> tensors,
                     std::initializer_list<std::string_view> scalars,
                     std::initializer_list<std::pair<int, std::string_view>> tuning) {
  const OpDef& op = find_op(api);
  const OpSchema& s = op.schema();
  auto mismatch = [&](const char* what) {
    return std::logic_error(fmt::format("{}: its typed API was generated from another spec ({} differ); rebuild "
                                        "libejk", api, what));
  };
  if (tensors.size() != s.tensors().size() || scalars.size() != s.scalars().size()) throw mismatch("argument counts");
  size_t i = 0;
  for (std::string_view n : tensors)
    if (s.tensors()[i++].name != n) throw mismatch("tensors");
  i = 0;
  for (std::string_view n : scalars)
    if (s.scalars()[i++].name != n) throw mismatch("scalars");
  for (const auto& [a, n] : tuning)
    if (a < 0 || size_t(a) >= s.axes().size() || s.axes()[a].name != n) throw mismatch("axes");
  return op;
}

void attach_output(Bound& b, ArgPack& pack, int t, const TensorView& v) {
  const TensorArgDef& d = b.op->schema().tensors()[t];
  pack.tensors[t] = &v;
  if (!d.like.empty()) {
    b.absent[t] = b.absent[b.op->schema().tensor_index(d.like)];
    return;
  }
  // output_shape leaves optional dims out.
  const Layout& l = d.layout_in(std::string(b.mode_name()));
  b.absent[t] = int8_t(std::count_if(l.dims.begin(), l.dims.end(), [](const LayoutDim& x) { return x.optional; }));
}

RunInfo run_bound(const Bound& b, const Context& ctx) {
  const Backend backend = resolve_backend(*b.op, b.device, ctx.backend);
  const std::shared_ptr<const PlanData> plan = plan_for(b, backend);
  execute(b, *plan, ctx);
  return plan->info();
}

}  // namespace ejk::engine
