// An op's spec, parsed and validated: axes, arguments, backends, constraints, candidate
// configs, heuristics and the ahead-of-time variant sets. The generator and the runtime both
// build keys through this class from the same spec text (the runtime from a copy the generator
// embeds), so the AOT set, the registry and run-time key construction cannot disagree.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/core/op_args.h"
#include "ejk/core/variant_key.h"

namespace ejk {

struct AxisDef {
  std::string name;
  AxisKind kind = AxisKind::Int;
  std::string token;                     // Int: prefix; Flag: token when on
  bool tuning = false;                   // Flag: chosen by a backend's heuristic (a schedule or
                                         // code-shape choice), never by an argument
  std::vector<int64_t> int_values;       // Int: values the generator may pre-build
  int64_t jit_min = 0, jit_max = 0;      // Int: other values allowed through JIT, in range ...
  int64_t jit_multiple_of = 1;           // ... and a multiple of this
  std::vector<std::string> enum_values;  // Enum
  std::string doc;
  std::string from;                      // Int: the layout symbol whose size sets it ("D")
  int line = 0;                          // where the spec defines it, for messages
};

struct TargetDef {
  std::string name;                        // "avx512", "sm90a"
  std::vector<std::string> compile_flags;  // AOT flags for this target
  std::vector<std::string> requires_features;  // host CPU features (cpu) or arch facts
  // Integer facts about the target usable in constraints and heuristics (e.g. sm: 90,
  // smem_bytes: 232448). Every target of a backend defines the same names.
  std::map<std::string, int64_t> vars;
  std::string doc;
  int line = 0;
};

struct HeuristicRule {
  std::string when;                       // expression over problem variables
  std::map<std::string, int64_t> choose;  // axis -> value
  int line = 0;
};

struct BackendDef {
  std::string name;                      // "cpu", "cuda"
  std::vector<TargetDef> targets;
  std::string template_file;             // under templates/
  std::string source_suffix;             // ".cpp", ".cu"
  std::vector<std::string> constraints;  // expressions over axis values; all must hold
  std::vector<std::map<std::string, int64_t>> configs;  // candidate block configs
  std::vector<HeuristicRule> heuristic;  // first rule whose `when` holds wins
  // AOT sets: each maps axis (or "target") -> allowed values; the product is pre-built.
  std::vector<std::map<std::string, std::vector<std::string>>> aot;

  // The op's axes with this backend's domains (the spec's `domains` narrow or replace the
  // op-wide ones), in the op's axis order. Keys of this backend are validated against these.
  std::vector<AxisDef> axes;
  std::string doc;
  int line = 0;
  std::vector<int> constraint_lines;  // parallel to constraints
  std::vector<int> aot_lines;         // parallel to aot

  const TargetDef* find_target(std::string_view name) const;  // nullptr if absent
  const AxisDef& axis(std::string_view name) const;           // InvalidArgument if absent
};

// The targets specs share (specs/targets.yaml): per backend, each target's flags, requires and
// vars, declared once. A spec's `targets: [avx512, avx2]` takes them from here in its own order
// of preference; a map of targets in a spec still declares its own.
struct TargetTable {
  static constexpr std::string_view kFileName = "targets.yaml";  // beside the specs
  std::map<std::string, std::vector<TargetDef>> backends;
  // Errors: SpecError "file:line: key: what is wrong", as for specs.
  static TargetTable parse(std::string_view yaml_text, std::string file_name);
};

class OpSchema {
 public:
  // Parses and validates spec text. Errors: SpecError "file:line: key: what is wrong".
  // `targets`: the shared table that `targets: [names]` refer to (none: such a spec is refused).
  static OpSchema parse(std::string_view yaml_text, std::string file_name, const TargetTable* targets = nullptr);

  const std::string& op() const { return op_; }        // kernel family, e.g. "flash_fwd"
  const std::string& api() const { return api_; }      // user-facing op, e.g. "flash_attention"
  const std::string& file() const { return file_; }
  // A companion kernel's op (e.g. flash_fwd_bias_rows): launched by another op, no API of its own.
  bool internal() const { return internal_; }
  const std::vector<AxisDef>& axes() const { return axes_; }
  const std::vector<TensorArgDef>& tensors() const { return tensors_; }
  const std::vector<ScalarArgDef>& scalars() const { return scalars_; }
  const std::vector<ModeDef>& modes() const { return modes_; }
  // Size symbols of the tensors' layouts, in order of first use; LayoutDim::symbol indexes it.
  const std::vector<std::string>& symbols() const { return symbols_; }
  // Groups of optional arguments given all together or not at all.
  const std::vector<std::vector<std::string>>& together() const { return together_; }
  int tensor_index(std::string_view name) const;  // -1 if absent
  int scalar_index(std::string_view name) const;  // -1 if absent
  const std::vector<BackendDef>& backends() const { return backends_; }
  const BackendDef& backend(std::string_view name) const;  // InvalidArgument if absent
  bool has_backend(std::string_view name) const;

  // A key with every axis at its first value / off, for the given backend and target.
  VariantKey blank_key(std::string_view backend, std::string_view target) const;
  // Inverse of to_string(); InvalidArgument naming the bad token.
  VariantKey parse_key(std::string_view text) const;
  // Domain and constraint checks; InvalidArgument naming the axis and the allowed values.
  void validate(const VariantKey& key) const;
  // The expanded, validated, de-duplicated AOT set of a backend, in a stable order.
  std::vector<VariantKey> aot_keys(std::string_view backend) const;
  // Heuristic: axis values chosen for a problem (variables such as head_dim, seqlen_q, ...).
  std::map<std::string, int64_t> choose_config(std::string_view backend,
                                               const std::map<std::string, int64_t>& problem) const;
  // The same with the target's vars (e.g. sm) visible to the rules; needed when a backend's
  // heuristic uses them.
  std::map<std::string, int64_t> choose_config(std::string_view backend, std::string_view target,
                                               const std::map<std::string, int64_t>& problem) const;
  // Values for template placeholders: key, symbol, target, each axis (flags as true/false).
  std::map<std::string, std::string> template_vars(const VariantKey& key) const;

  const std::string& doc() const { return doc_; }
  // The rel-L2 bound of every output against the float64 reference, per element type name
  // (f32, bf16, f16): the spec's `tolerance:` over the defaults 1e-5, 1e-2, 1e-2.
  const std::map<std::string, double>& tolerance() const { return tolerance_; }
  const std::vector<ProblemVarDef>& problem_vars() const { return problem_; }
  const AxisDef& axis(std::string_view name) const;  // op-wide domain; InvalidArgument if absent
  // Position of `value` in enum axis `axis` (how enums appear in expressions); InvalidArgument.
  int64_t enum_index(std::string_view axis, std::string_view value) const;
  // Names every expression may use: each enum value stands for its position in its axis.
  const std::map<std::string, int64_t>& enum_constants() const { return enum_constants_; }
  // Variables of a key's constraints: axis values (flags 0/1, enums their position), enum
  // constants and the target's vars.
  std::map<std::string, int64_t> constraint_vars(const VariantKey& key) const;

 private:
  // Expands one AOT set of a backend into keys (each validated).
  std::vector<VariantKey> expand_aot_set(const BackendDef& b, size_t set) const;
  // Throws SpecError for an AOT set that names a key the constraints reject.
  void check_aot_sets() const;

  std::string op_, api_, file_, doc_;
  bool internal_ = false;
  std::vector<AxisDef> axes_;
  std::vector<TensorArgDef> tensors_;
  std::vector<ScalarArgDef> scalars_;
  std::vector<ModeDef> modes_;
  std::vector<std::string> symbols_;
  std::vector<std::vector<std::string>> together_;
  std::vector<ProblemVarDef> problem_;
  std::vector<BackendDef> backends_;
  std::map<std::string, int64_t> enum_constants_;
  std::map<std::string, double> tolerance_;
};

}  // namespace ejk
