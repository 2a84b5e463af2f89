// The C ABI's description of ops for language bindings: names, each op's arguments in its
// spec's order, and the outputs a call implies (over ejk::op_names, describe_op, output_specs).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/op.h"
#include "engine/op_def.h"

namespace ejk::capi {
namespace {

// One op's description in C form; the strings are owned by `info` and never move (a deque of
// described ops keeps every element where it was made).
struct Described {
  OpInfo info;
  std::vector<ejk_param_info> params;
  ejk_op_info c{};
};

struct Catalog {
  std::mutex mu;
  std::vector<std::string> names = op_names();
  std::deque<Described> described;
};

Catalog& catalog() {
  static Catalog* c = new Catalog();  // read by bindings until exit: never destroyed
  return *c;
}

void fill(Described& d) {
  const auto param = [](const std::string& name, int32_t role, bool optional, bool contiguous,
                        const std::string& type, const std::string& layout, const std::string& default_value,
                        const std::string& doc) {
    return ejk_param_info{name.c_str(),   role,         optional ? 1 : 0,      contiguous ? 1 : 0,
                          type.c_str(), layout.c_str(), default_value.c_str(), doc.c_str()};
  };
  static const std::string empty;
  // OpInfo lists the schema's tensors in its order; the schema also says which are contiguous.
  const auto& defs = engine::find_op(d.info.name).schema().tensors();
  for (size_t i = 0; i < d.info.tensors.size(); ++i) {
    const OpTensorInfo& t = d.info.tensors[i];
    const bool contiguous = i < defs.size() && defs[i].name == t.name && defs[i].contiguous;
    d.params.push_back(param(t.name, t.output ? EJK_PARAM_OUTPUT : EJK_PARAM_INPUT, t.optional, contiguous, t.dtypes,
                             t.layout, empty, t.doc));
  }
  for (const OpScalarInfo& s : d.info.scalars)
    d.params.push_back(param(s.name, EJK_PARAM_SCALAR, s.default_value == "none", false, s.type, empty,
                             s.default_value, s.doc));
  // The int axes no argument sets: what a caller's EJK_ARG_TUNE entries may name.
  static const std::string i64 = "i64", none = "none";
  for (const OpAxisInfo& a : d.info.axes)
    if (a.kind == "int" && a.tuning && !a.from_argument)
      d.params.push_back(param(a.name, EJK_PARAM_TUNING, true, false, i64, a.domain, none, a.doc));
  d.c = {d.info.name.c_str(), d.info.doc.c_str(), static_cast<int32_t>(d.params.size()), d.params.data()};
}

const ejk_op_info& describe(const char* op) {
  Catalog& c = catalog();
  std::lock_guard lk(c.mu);
  for (const Described& d : c.described)
    if (d.info.name == op) return d.c;
  OpInfo info = describe_op(op);  // InvalidArgument naming the ops for an unknown one
  Described& d = c.described.emplace_back();
  d.info = std::move(info);
  fill(d);
  return d.c;
}

}  // namespace
}  // namespace ejk::capi

using namespace ejk;

extern "C" int32_t ejk_op_count(void) { return static_cast<int32_t>(capi::catalog().names.size()); }

extern "C" const char* ejk_op_name(int32_t index) {
  const auto& names = capi::catalog().names;
  return index >= 0 && static_cast<size_t>(index) < names.size() ? names[size_t(index)].c_str() : nullptr;
}

extern "C" int ejk_describe_op(const char* op, ejk_op_info* info) {
  return capi::guarded([&] {
    if (op == nullptr) throw InvalidArgument("ejk_describe_op: op is NULL");
    if (info == nullptr) throw InvalidArgument("ejk_describe_op: info: expected an ejk_op_info to fill");
    *info = capi::describe(op);
  });
}

extern "C" int ejk_output_specs(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx,
                                ejk_output_spec* specs, int32_t capacity, int32_t* num_specs) {
  return capi::guarded([&] {
    if (op == nullptr) throw InvalidArgument("ejk_output_specs: op is NULL");
    if (num_specs == nullptr) throw InvalidArgument("ejk_output_specs: num_specs: expected an int32_t to set");
    if (capacity < 0 || (capacity > 0 && specs == nullptr))
      throw InvalidArgument(fmt::format("ejk_output_specs: specs: capacity {} without an array", capacity));
    const Args a = capi::to_args(args, num_args, "ejk_output_specs");
    CpuExecutor executor;
    capi::to_context(ctx, executor);  // validated as ejk_run would; outputs do not depend on it
    const std::vector<OutputSpec> out = output_specs(op, a);
    *num_specs = static_cast<int32_t>(out.size());
    if (static_cast<int64_t>(out.size()) > capacity)
      throw InvalidArgument(fmt::format("ejk_output_specs: capacity: {} specs, {} has {} outputs", capacity, op,
                                        out.size()));
    for (size_t i = 0; i < out.size(); ++i) {
      ejk_output_spec& s = specs[i];
      s = ejk_output_spec{};
      if (out[i].name.size() >= sizeof(s.name))
        throw InvalidArgument(fmt::format("ejk_output_specs: {}: output name '{}' is longer than {} bytes", op,
                                          out[i].name, sizeof(s.name) - 1));
      std::memcpy(s.name, out[i].name.c_str(), out[i].name.size() + 1);
      s.dtype = static_cast<int32_t>(out[i].dtype);
      s.rank = static_cast<int32_t>(out[i].shape.size());
      for (int32_t d = 0; d < s.rank && d < 8; ++d) s.shape[d] = out[i].shape[size_t(d)];
    }
  });
}
