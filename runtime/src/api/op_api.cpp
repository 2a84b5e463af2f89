// The generic op API (ejk/op.h) over the engine.
#include "ejk/op.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "ejk/admin.h"
#include "ejk/core/error.h"
#include "engine/bind.h"
#include "engine/call.h"
#if EJK_HAVE_CUDA
#include "cuda/device.h"
#include "engine/cuda_exec.h"
#endif

namespace ejk {
namespace detail {
struct PlanState {
  const engine::OpDef* op;
  std::shared_ptr<const engine::PlanData> plan;
};
}  // namespace detail

namespace {

std::string axis_domain(const AxisDef& a) {
  switch (a.kind) {
    case AxisKind::Flag: return "on, off";
    case AxisKind::Enum: return fmt::format("{}", fmt::join(a.enum_values, ", "));
    case AxisKind::Int:
      return a.jit_max > 0 ? fmt::format("{}..{} in multiples of {}", a.jit_min, a.jit_max, a.jit_multiple_of)
                           : fmt::format("{}", fmt::join(a.int_values, ", "));
  }
  return "";
}

bool set_by_arguments(const OpSchema& s, const AxisDef& a) {
  if (a.kind == AxisKind::Enum || !a.from.empty()) return true;
  for (const auto& t : s.tensors()) if (t.sets_flag == a.name) return true;
  for (const auto& x : s.scalars()) if (x.sets_flag == a.name) return true;
  return false;
}

// A bound call whose arguments live in `pack` (bind keeps pointers into it).
struct BoundCall {
  const engine::OpDef& op;
  engine::ArgPack pack;
  engine::Bound b;
  BoundCall(std::string_view name, const Args& args, bool shapes_only, bool outputs_optional)
      : op(engine::find_op(name)), pack(engine::pack_args(op, args)) {
    pack.shapes_only = shapes_only;
    pack.outputs_optional = outputs_optional;
    b = engine::bind(op, pack);
    op.check(b);
  }
};

}  // namespace

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const engine::OpDef* op : engine::all_ops()) names.push_back(op->name());
  std::sort(names.begin(), names.end());
  return names;
}

OpInfo describe_op(std::string_view name) {
  const OpSchema& s = engine::find_op(name).schema();
  OpInfo info{s.api(), s.op(), s.doc(), {}, {}, {}, {}, {}, s.tolerance()};
  for (const TensorArgDef& t : s.tensors()) {
    OpTensorInfo ti{t.name, t.like.empty() ? t.layout.text : "like " + t.like, fmt::format("{}", fmt::join(t.dtypes, "|")),
                    t.doc, {}, t.optional, t.output, t.contiguous};
    for (const auto& [mode, l] : t.mode_layouts) ti.mode_layouts.emplace_back(mode, l.text);
    info.tensors.push_back(std::move(ti));
  }
  for (const ScalarArgDef& x : s.scalars()) info.scalars.push_back({x.name, x.type_name, x.default_value, x.doc});
  for (const AxisDef& a : s.axes())
    info.axes.push_back({a.name, a.kind == AxisKind::Int ? "int" : a.kind == AxisKind::Enum ? "enum" : "flag",
                         axis_domain(a), a.doc, a.tuning || (a.kind == AxisKind::Int && a.from.empty()),
                         set_by_arguments(s, a), a.int_values});
  for (const BackendDef& b : s.backends()) {
    info.backends.push_back(b.name);
    info.configs[b.name] = b.configs;
  }
  return info;
}

std::vector<OutputSpec> output_specs(std::string_view name, const Args& args) {
  BoundCall c(name, args, /*shapes_only=*/true, /*outputs_optional=*/true);
  std::vector<OutputSpec> out;
  const auto& tensors = c.op.schema().tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (!tensors[t].output) continue;
    const std::string& d = tensors[t].dtypes.front();
    const bool axis = d == "dtype" || std::any_of(c.op.schema().axes().begin(), c.op.schema().axes().end(),
                                                  [&](const AxisDef& a) { return a.name == d; });
    out.push_back({tensors[t].name, engine::output_shape(c.b, int(t)), axis ? c.b.dtype : parse_dtype(d)});
  }
  return out;
}

std::string variant_key(std::string_view name, const Args& args, const Context& ctx) {
  BoundCall c(name, args, /*shapes_only=*/true, /*outputs_optional=*/true);
  const Backend backend = engine::resolve_backend(c.op, c.b.device, ctx.backend);
  return engine::plan_for(c.b, backend, /*load=*/false)->key_string;
}

void check_args(std::string_view name, const Args& args) {
  BoundCall c(name, args, /*shapes_only=*/false, /*outputs_optional=*/true);
}

RunInfo run(std::string_view name, const Args& args, const Context& ctx) {
  const engine::OpDef& op = engine::find_op(name);
  return engine::call(op, engine::pack_args(op, args), ctx);
}

std::vector<ReferenceOutput> reference(std::string_view name, const Args& args) {
  BoundCall c(name, args, /*shapes_only=*/false, /*outputs_optional=*/true);
  if (c.b.device.kind != DeviceKind::cpu)
    throw InvalidArgument(fmt::format("{}: the reference takes CPU tensors, got tensors on {}", name, to_string(c.b.device)));
  std::vector<ReferenceOutput> out;
  double* ptrs[engine::kMaxTensors] = {};
  const auto& tensors = c.op.schema().tensors();
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (!tensors[t].output) continue;
    ReferenceOutput r{tensors[t].name, engine::output_shape(c.b, int(t)), {}};
    r.values.resize(size_t(TensorView{nullptr, DType::f64, {}, r.shape, contiguous_strides(r.shape)}.numel()));
    out.push_back(std::move(r));
  }
  for (size_t i = 0, t = 0; t < tensors.size(); ++t)
    if (tensors[t].output) ptrs[t] = out[i++].values.data();
  c.op.reference(c.b, ptrs);
  return out;
}

double call_flops(std::string_view name, const Args& args) {
  BoundCall c(name, args, /*shapes_only=*/false, /*outputs_optional=*/true);
  return c.op.flops(c.b);
}

Plan plan(std::string_view name, const Args& args, const Context& ctx) {
  BoundCall c(name, args, /*shapes_only=*/false, /*outputs_optional=*/false);
  const Backend backend = engine::resolve_backend(c.op, c.b.device, ctx.backend);
  Plan p;
  auto state = std::make_shared<detail::PlanState>(detail::PlanState{&c.op, engine::plan_for(c.b, backend)});
#if EJK_HAVE_CUDA
  if (backend == Backend::cuda) {  // reserve now: run() may then be captured in a graph
    const cuda::DeviceInfo& dev = cuda::use_device(c.b.device.index);
    const engine::OpDef::Workspace need = c.op.cuda_workspace(c.b, *state->plan);
    auto stream = static_cast<cuda::CUstream>(ctx.stream);
    engine::stream_workspace(dev.ordinal, stream).reserve(need.scratch_bytes, need.counter_bytes, stream);
  }
#endif
  p.state_ = std::move(state);
  return p;
}

RunInfo Plan::run(const Args& args, const Context& ctx) const {
  if (!state_) throw InvalidArgument("Plan::run: this plan is empty (make it with ejk::plan)");
  const engine::OpDef& op = *state_->op;
  const engine::ArgPack pack = engine::pack_args(op, args);
  const engine::Bound b = engine::bind(op, pack);
  op.check(b);
  const engine::PlanData& p = *state_->plan;
  if (!engine::plan_matches(b, engine::resolve_backend(op, b.device, ctx.backend), p))
    throw InvalidArgument(fmt::format("{}: these arguments need another variant than the plan's {} (a different "
                                      "dtype, flag, size class or device): make a plan for them", op.name(), p.key_string));
  engine::execute(b, p, ctx);
  return p.info();
}

const std::string& Plan::key() const {
  static const std::string empty;
  return state_ ? state_->plan->key_string : empty;
}

}  // namespace ejk
