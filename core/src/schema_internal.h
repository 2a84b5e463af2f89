// Pieces of OpSchema::parse split across files (internal to ejk_core).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ejk/core/schema.h"
#include "spec_reader.h"

namespace ejk::detail {

// The argument sections of a spec (schema_args.cpp).
struct ArgSections {
  std::vector<ModeDef> modes;
  std::vector<TensorArgDef> tensors;
  std::vector<ScalarArgDef> scalars;
  std::vector<std::vector<std::string>> together;
  std::vector<ProblemVarDef> problem;
  std::vector<std::string> symbols;
};
// `internal`: a companion kernel's op (no API), whose outputs need not be sized by its inputs.
ArgSections parse_arg_sections(const SpecReader& r, const Fields& top, const std::vector<AxisDef>& axes,
                               const std::map<std::string, int64_t>& enum_constants, bool internal);

// One `backends.<name>` section, validated against the op's axes, problem variables and enum
// constants (schema_backend.cpp). AOT sets are checked against constraints later, by the schema.
BackendDef parse_backend_section(const SpecReader& r, const YAML::Node& n, const std::string& name,
                                 const std::vector<AxisDef>& axes,
                                 const std::vector<ProblemVarDef>& problem,
                                 const std::map<std::string, int64_t>& enum_constants,
                                 const TargetTable* targets);

// The `values` (and, for int axes, `jit`) of an axis or of a backend's domain override, read
// from the map `f` into `a` according to a.kind (schema_parse.cpp).
void parse_domain(const SpecReader& r, const Fields& f, const std::string& path, AxisDef& a);

// Whether `v` is in the axis's domain: a listed value, or inside its JIT range.
bool int_in_domain(const AxisDef& a, int64_t v);
// "64, 128, or 8..256 in multiples of 8", for messages.
std::string describe_domain(const AxisDef& a);

}  // namespace ejk::detail
