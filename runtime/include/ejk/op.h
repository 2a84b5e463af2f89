// Every op by name: its signature (from its spec), a call with named arguments, the float64
// reference, and a plan/run split. The typed headers (ejk/ops/*.h) are thin layers over this;
// the CLI and the language bindings use it directly.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ejk/export.h"
#include "ejk/tensor.h"
#include "ejk/types.h"

namespace ejk {

// A scalar argument: absent (the spec's default), a bool, an integer, a float or an integer
// pair (a window given as one integer w means (w, w)).
using Scalar = std::variant<std::monostate, bool, int64_t, double, std::array<int64_t, 2>>;

// An op's arguments by the names its spec gives them: input and output tensors, scalars, and
// values for tuning axes (block sizes; absent: the spec's heuristic chooses).
class EJK_API Args {
 public:
  Args& set(std::string_view name, const TensorView& t);
  Args& set(std::string_view name, Scalar v);
  Args& tune(std::string_view axis, int64_t value);

  const TensorView* tensor(std::string_view name) const;  // nullptr when not set
  const Scalar* scalar(std::string_view name) const;      // nullptr when not set
  const std::vector<std::pair<std::string, TensorView>>& tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, Scalar>>& scalars() const { return scalars_; }
  const std::vector<std::pair<std::string, int64_t>>& tuning() const { return tuning_; }

 private:
  std::vector<std::pair<std::string, TensorView>> tensors_;
  std::vector<std::pair<std::string, Scalar>> scalars_;
  std::vector<std::pair<std::string, int64_t>> tuning_;
};

struct OpTensorInfo {
  std::string name, layout, dtypes, doc;  // layout "[B, Sq, Hq, D]"; dtypes "bf16|f16|f32"
  std::vector<std::pair<std::string, std::string>> mode_layouts;  // ("varlen", "[Tq, Hq, D]")
  bool optional = false, output = false;
  bool contiguous = false;  // the whole tensor must be contiguous (else only its last dim)
};
struct OpScalarInfo {
  std::string name, type, default_value, doc;  // type: f32, f64, i64, bool, i64[2]
};
struct OpAxisInfo {
  std::string name, kind, domain, doc;  // kind: int, enum, flag; domain as the spec allows it
  bool tuning = false;                  // chosen by the heuristic unless tuned
  bool from_argument = false;           // set by the arguments (a dtype, a size or a flag)
  std::vector<int64_t> values;          // int axes: the values the spec lists (its AOT candidates)
};
struct OpInfo {
  std::string name, kernel, doc;  // kernel: the spec's kernel family ("flash_fwd")
  std::vector<OpTensorInfo> tensors;
  std::vector<OpScalarInfo> scalars;
  std::vector<OpAxisInfo> axes;
  std::vector<std::string> backends;
  // Per backend, its candidate tile configs (tuning axis -> value), as the spec lists them.
  std::map<std::string, std::vector<std::map<std::string, int64_t>>> configs;
  // rel-L2 bound of every output against the float64 reference, per element type of the op's
  // dtype axis ("f32", "bf16", "f16"), as the spec declares it.
  std::map<std::string, double> tolerance;
};

EJK_API std::vector<std::string> op_names();  // the ops a user can call, sorted
EJK_API OpInfo describe_op(std::string_view op);

struct OutputSpec {
  std::string name;
  Dims shape;
  DType dtype = DType::f32;
};
// Shapes and dtypes of the outputs `args` (inputs and scalars) imply; validates the inputs.
EJK_API std::vector<OutputSpec> output_specs(std::string_view op, const Args& args);

// The canonical key of the variant a call with `args` would run, after every check a run makes;
// nothing is compiled or launched, and tensors may have null data.
EJK_API std::string variant_key(std::string_view op, const Args& args, const Context& ctx = {});

// Every check a run makes, on the values of host-resident metadata (cum_seqlens on the CPU)
// too; outputs may be absent and nothing is planned, compiled or run.
EJK_API void check_args(std::string_view op, const Args& args);

// Runs `op`: its outputs are tensors of `args` too. Asynchronous on CUDA (ctx.stream).
EJK_API RunInfo run(std::string_view op, const Args& args, const Context& ctx = {});

struct ReferenceOutput {
  std::string name;
  Dims shape;
  std::vector<double> values;  // contiguous in `shape`
};
// The float64 reference of `op` on CPU tensors: the same checks and semantics as the kernels.
EJK_API std::vector<ReferenceOutput> reference(std::string_view op, const Args& args);

namespace detail {
struct PlanState;
}

// The plan/run split: plan() does every check, chooses and loads the variant and reserves the
// workspace of ctx.stream; run() then only binds pointers and launches, so it costs
// microseconds and can be captured in a CUDA graph. A run's tensors may be other memory than
// the plan's, with the same shapes, strides and dtypes, and its scalars the same.
class EJK_API Plan {
 public:
  RunInfo run(const Args& args, const Context& ctx) const;
  const std::string& key() const;

 private:
  friend EJK_API Plan plan(std::string_view op, const Args& args, const Context& ctx);
  std::shared_ptr<const detail::PlanState> state_;
};
EJK_API Plan plan(std::string_view op, const Args& args, const Context& ctx = {});

}  // namespace ejk
