// Binding: an op's arguments checked against its spec's declarations (which tensors are given,
// modes, dtypes, devices, layouts with their size symbols, strides, scalar types). Every error
// is an InvalidArgument "<op>: <argument>: <what was expected>, got <what was given>".
#pragma once
#include <initializer_list>
#include <string_view>
#include <utility>

#include "engine/op_def.h"

namespace ejk::engine {

Bound bind(const OpDef& op, const ArgPack& args);

// The shape of output tensor t that the bound inputs imply.
Dims output_shape(const Bound& b, int t);

// ArgPack from named arguments (the generic API); InvalidArgument for a name the spec lacks.
ArgPack pack_args(const OpDef& op, const Args& args);
// The inverse: named arguments from a pack (tuning values left out).
Args args_of(const OpDef& op, const ArgPack& pack);

// What the generated typed APIs (ejk/ops/<op>.h) build on. They pack arguments by spec index,
// so spec_op checks once that the indices they were generated with are the spec's: the names
// of every tensor and scalar in order, and of each tuning axis at its index.
const OpDef& spec_op(std::string_view api, std::initializer_list<std::string_view> tensors,
                     std::initializer_list<std::string_view> scalars,
                     std::initializer_list<std::pair<int, std::string_view>> tuning);
// An output the caller's allocating form made from output_shape() after binding with
// outputs_optional: set in the pack and taken as bound (its shape is the bound one), so the
// call binds once.
void attach_output(Bound& b, ArgPack& pack, int t, const TensorView& v);
// plan_for + execute of a call bound (and checked) already.
RunInfo run_bound(const Bound& b, const Context& ctx);

}  // namespace ejk::engine
