#include "engine/op_def.h"

#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "registry.h"

namespace ejk::engine {
namespace {

[[noreturn]] void missing(const OpDef& op, const char* what, std::string_view name) {
  throw std::logic_error(fmt::format("op {}: its code names {} '{}', which {} does not declare", op.name(), what,
                                     name, op.schema().file()));
}

}  // namespace

OpDef::OpDef(std::string_view kernel_op) : schema_(&detail::op_schema(kernel_op)) {
  // ArgPack and Bound hold fixed arrays: a larger spec would write past them.
  if (schema_->tensors().size() > size_t(kMaxTensors) || schema_->scalars().size() > size_t(kMaxScalars))
    throw std::logic_error(fmt::format("op {}: more tensors or scalars than the engine holds ({}, {})", name(),
                                       kMaxTensors, kMaxScalars));
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

const OpDef& find_op(std::string_view api_name) {
  for (const OpDef* op : all_ops())
    if (op->name() == api_name) return *op;
  std::string known;
  for (const OpDef* op : all_ops()) known += (known.empty() ? "" : ", ") + op->name();
  throw InvalidArgument(fmt::format("op '{}' is not in this build (ops: {})", api_name, known));
}

}  // namespace ejk::engine
