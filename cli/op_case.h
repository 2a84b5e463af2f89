// What `ejk run OP` needs from an op beyond its spec: the options that describe a problem, its
// random inputs, and the work of one call (FLOPs or bytes). Everything else (devices, timing,
// the float64 check, --save/--load, JSON) is generic (run_cmd.cpp).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "host_case.h"

namespace ejk::cli {

struct InputSpec {
  std::string name;
  Dims shape;
  DType dtype = DType::f32;
};

struct Work {
  double flops = 0;  // reported as GFLOP/s when > 0
  double bytes = 0;  // else as GB/s
};

// The options a case adds to its `ejk run OP` subcommand. Values stay text, parsed strictly by the
// case (parse.h); the CLI's parser is behind this interface, so no case compiles CLI11.
class CaseOptions {
 public:
  // --name TEXT; the value's current text is its default.
  virtual void add_option(const std::string& name, std::string& value, const std::string& doc) = 0;
  // --name, a flag without a value.
  virtual void add_flag(const std::string& name, bool& value, const std::string& doc) = 0;

 protected:
  ~CaseOptions() = default;
};

class OpCase {
 public:
  virtual ~OpCase() = default;
  virtual const char* op() const = 0;
  // The problem's options (sizes and features) on the op's `ejk run` subcommand.
  virtual void add_options(CaseOptions& cmd) = 0;
  // The input tensors of the problem the options describe (validated before any allocation),
  // and its scalars.
  virtual std::vector<InputSpec> inputs(DType dtype) const = 0;
  virtual void scalars(HostCase& c) const { (void)c; }
  // Random contents of one input (allocated, in its dtype); the default fills floating tensors
  // with normal values, exact in the dtype.
  virtual void fill(const std::string& name, Tensor& t, std::mt19937_64& rng) const;
  // Scalars that depend on the inputs' contents (after fill or --load).
  virtual void finish(HostCase& c) const { (void)c; }
  virtual Work work(const HostCase& c) const = 0;
};

// The ops with a CLI case, sorted by op name. A case's .cpp registers it with EJK_REGISTER_CASE.
const std::vector<OpCase*>& op_cases();

// Adds a case to op_cases() (through EJK_REGISTER_CASE); it keeps the factory, called on first
// use of op_cases().
struct CaseRegistrar {
  explicit CaseRegistrar(OpCase* (*make)());
};

}  // namespace ejk::cli

#define EJK_CASE_CONCAT_(a, b) a##b
#define EJK_CASE_CONCAT(a, b) EJK_CASE_CONCAT_(a, b)
// In a case's .cpp, at namespace scope: EJK_REGISTER_CASE(my_case), `my_case` returning the
// case (an OpCase* that lives as long as the program).
#define EJK_REGISTER_CASE(factory)                                                                \
  static const ::ejk::cli::CaseRegistrar EJK_CASE_CONCAT(ejk_case_registrar_, __LINE__)( \
      []() -> ::ejk::cli::OpCase* { return factory(); })
