// Binding: an op's arguments checked against its spec's declarations (which tensors are given,
// modes, dtypes, devices, layouts with their size symbols, strides, scalar types). Every error
// is an InvalidArgument "<op>: <argument>: <what was expected>, got <what was given>".
#pragma once
#include "engine/op_def.h"

namespace ejk::engine {

Bound bind(const OpDef& op, const ArgPack& args);

// The shape of output tensor t that the bound inputs imply.
Dims output_shape(const Bound& b, int t);

// ArgPack from named arguments (the generic API); InvalidArgument for a name the spec lacks.
ArgPack pack_args(const OpDef& op, const Args& args);

}  // namespace ejk::engine
