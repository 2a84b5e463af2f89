// The contract between the engine and an op. An op supplies what only it knows: checks its spec
// cannot state, the problem variables of its heuristic, how to fill its kernels' parameters,
// its CPU task count, its CUDA launches, and its float64 reference. Everything else (binding
// and validating arguments from the spec, the variant key, finding or compiling the variant,
// workspace, streams, the C ABI and the CLI) is the engine's and is the same for every op.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/core/schema.h"
#include "ejk/op.h"

namespace ejk::engine {

constexpr int kMaxTensors = 24, kMaxScalars = 16, kMaxSymbols = 24, kMaxAxes = 24, kMaxProblem = 16;

class OpDef;

// One call's arguments in spec order: pointers to the caller's views (nothing is copied), the
// scalars, and tuning values by axis index (0: the heuristic's).
struct ArgPack {
  const TensorView* tensors[kMaxTensors] = {};
  Scalar scalars[kMaxScalars];
  int64_t tuning[kMaxAxes] = {};
  bool shapes_only = false;      // tensors may have null data (validation without a run)
  bool outputs_optional = false;  // outputs may be absent (sizing them)
};

// An ArgPack after the spec's checks: sizes of the layout symbols, the active mode, the dtype
// and device, and the flag axes the arguments turn on.
struct Bound {
  const OpDef* op = nullptr;
  const ArgPack* args = nullptr;
  int mode = -1;  // index into schema().modes(), or -1
  DType dtype = DType::f32;
  Device device{};
  int64_t sizes[kMaxSymbols] = {};
  uint32_t sizes_known = 0;       // bit per symbol
  Dims lead;                      // the "..." dims
  int8_t absent[kMaxTensors] = {};  // optional leading dims a tensor leaves out
  uint32_t flags = 0;             // bit per axis: flags the arguments turn on

  bool has(int t) const { return t >= 0 && args->tensors[t] != nullptr; }
  const TensorView& tensor(int t) const { return *args->tensors[t]; }
  void* data(int t) const { return has(t) ? args->tensors[t]->data : nullptr; }
  const Scalar& scalar(int s) const { return args->scalars[s]; }
  bool known(int sym) const { return (sizes_known >> sym) & 1u; }
  int64_t size(int sym) const { return sizes[sym]; }
  // Size and stride of layout position p of tensor t: 1 and 0 where an optional dim is absent.
  int64_t dim(int t, int p) const;
  int64_t stride(int t, int p) const;
  std::string_view mode_name() const;
};

// Problem variables by the spec's order (schema().problem_vars()); the op sets those it
// supplies at run time.
struct ProblemValues {
  int64_t value[kMaxProblem] = {};
  uint32_t set = 0;
  void put(int i, int64_t v) { value[i] = v, set |= 1u << i; }
};

// What a CPU call runs: `tasks` calls of the variant's entry over [0, tasks).
struct CpuWork {
  int64_t tasks = 0;
};

class CudaLaunchContext;  // engine/cuda_exec.h
struct PlanData;          // engine/call.h

class OpDef {
 public:
  explicit OpDef(std::string_view kernel_op);
  virtual ~OpDef() = default;
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;

  const OpSchema& schema() const { return *schema_; }
  const std::string& name() const { return schema_->api(); }
  // Index of a tensor, scalar, symbol, axis or problem variable of the spec; the op's code
  // names them, so a mismatch with its spec is a bug reported as such.
  int tensor(std::string_view name) const;
  int scalar(std::string_view name) const;
  int symbol(std::string_view name) const;
  int axis(std::string_view name) const;
  int problem_var(std::string_view name) const;

  // Checks the spec cannot state (divisibility, value ranges); InvalidArgument naming the
  // argument. Called after binding, before anything else.
  virtual void check(const Bound&) const {}
  // The problem variables the op supplies at run time (those the spec gives a default).
  virtual void problem(const Bound&, ProblemValues&) const {}
  // Companion kernels a variant's launches may use, as keys of internal ops.
  virtual std::vector<VariantKey> companions(const VariantKey&) const { return {}; }

  // CPU: fill the kernel's parameters (`params`: kParamBytes, 64-byte aligned) and say how many
  // tasks to run. May stage data (it runs on the calling thread before the tasks).
  static constexpr size_t kParamBytes = 4096;
  virtual CpuWork cpu_prepare(const Bound&, const PlanData&, void* params) const = 0;
  // CUDA: check device-side preconditions and launch, through `lc` only.
  virtual void cuda_launch(const Bound&, const PlanData&, CudaLaunchContext& lc) const = 0;
  // Workspace a CUDA call needs on its stream: scratch (contents undefined) and counters
  // (zero before the first launch; every launch must leave them zero).
  struct Workspace {
    size_t scratch_bytes = 0, counter_bytes = 0;
  };
  virtual Workspace cuda_workspace(const Bound&, const PlanData&) const { return {}; }
  // Facts an op derives from its plan's key once (tile sizes, kernel family), kept in the plan
  // (PlanData::facts_as) so that a call reads them instead of looking the key's axes up by name.
  static constexpr size_t kFactBytes = 128;
  virtual void plan_facts(const PlanData&, void* /*facts*/) const {}
  // Dynamic shared memory a CUDA key launches with, for reports without a problem (`ejk compile`).
  virtual int64_t cuda_dynamic_smem(const VariantKey&) const { return 0; }

  // The float64 reference on CPU tensors: `out[t]` for every output tensor t (nullptr for
  // inputs), each contiguous in the output's shape and already sized.
  virtual void reference(const Bound&, double* const* out) const = 0;

 private:
  const OpSchema* schema_;
};

// Every op a user can call, and internal ops by kernel family.
const std::vector<const OpDef*>& all_ops();
const OpDef& find_op(std::string_view api_name);  // InvalidArgument listing the ops

}  // namespace ejk::engine
