// What `ejk run` and `ejk tune` share: the options of an op's problem, making the problem (random
// or --load'ed), placing it on the device, and timing calls of it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ejk/op.h"
#include "ejk/tensor.h"
#include "host_case.h"
#include "op_case.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ejk::cli {

struct RunOptions {
  std::string dtype = "f32", backend = "cpu", iters = "5", seed = "0", save, load;
  bool check = false, json = false;
  std::map<std::string, std::string> tuning;  // axis -> value, from --block-q and the like
  std::vector<const CLI::Option*> problem;     // the case's own options that take a value (sizes)
};

// The case's problem options, and those of every run: --dtype, --backend, --iters, --seed,
// --check, --json, --save, --load, and one per tuning axis (--block-q ...).
void add_case_options(CLI::App* cmd, OpCase& oc, const std::shared_ptr<RunOptions>& o);

// Parses `ejk run OP` option words outside the CLI (the tests' problem lines). Each parse starts
// from the case's defaults, so an option a line does not name keeps no earlier line's value.
class ProblemParser {
 public:
  explicit ProblemParser(OpCase& oc) : oc_(oc) {}
  std::shared_ptr<RunOptions> parse(const std::vector<std::string>& words);

 private:
  OpCase& oc_;
  std::map<std::string, std::string> defaults_;  // read at the first parse, flags as "false"
};

// One output against the float64 reference.
struct OutputError {
  std::string name;
  double rel_l2 = 0, max_abs = 0;
  bool bad = false;  // NaN, or infinities where the reference has none (or the reverse)
};
OutputError compare_output(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref);

// The spec's rel-L2 bound for the op's outputs in `dtype` (a dtype it does not list: f32's 1e-5).
double tolerance(const std::string& op, DType dtype);

// `a` with the tuning values the options give.
Args with_tuning(Args a, const RunOptions& o);

// The problem the options describe (validated before anything is allocated), and the device it
// runs on (`fallback` says why auto picked the CPU).
HostCase make_case(OpCase& oc, const RunOptions& o, Backend backend, Device& device, std::string& fallback);

// The problem on the device: inputs copied there, outputs allocated there, `tuning`'s values.
struct DeviceProblem {
  std::vector<Tensor> keep;
  Args args;
  std::vector<std::pair<std::string, Tensor>> outputs;
};
DeviceProblem on_device(const std::string& op, const HostCase& c, Device device, const Args& tuning);

// One call (which finds or compiles the variant), then `iters` timed ones: medians. (In the CLI
// itself; everything else here is in the support library, cli/run_case.cpp.)
struct Timing {
  RunInfo info;
  double ms = 0, host_us = 0;
};
Timing time_calls(const std::string& op, const Args& args, Device device, int iters);

}  // namespace ejk::cli
