// A problem on the host: an op's inputs (CPU tensors in their dtypes) and scalars, made at
// random or read from a --save folder, and written back to one: every tensor as <name>.npy
// (bf16 and f16 as float32 holding the exact values, so any reader can use them), and
// params.json (op, dtype, seed, scalars).
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ejk/op.h"
#include "ejk/tensor.h"

namespace ejk::cli {

struct HostCase {
  std::string op;
  DType dtype = DType::f32;  // the op's dtype axis
  uint64_t seed = 0;
  std::vector<std::pair<std::string, Tensor>> inputs;
  std::vector<std::pair<std::string, Scalar>> scalars;

  const Tensor* input(std::string_view name) const;  // nullptr when absent
  const Scalar* scalar(std::string_view name) const;
  void set(std::string name, Scalar v);
  Args args() const;  // views of the inputs, and the scalars
};

// Normal values rounded to `t`'s floating dtype (bf16, f16 or f32).
void fill_normal(Tensor& t, std::mt19937_64& rng, float stddev = 1.0f);

// Float32 copy of a floating tensor (values exact), or the tensor itself when already f32.
Tensor to_f32(const Tensor& t);
// The same values in `dtype` (f32 values rounded to bf16/f16).
Tensor from_f32(const Tensor& t, DType dtype);
// Values as double, for comparisons (any dtype the ops produce).
std::vector<double> to_double(const Tensor& t);

void save_case(const HostCase& c, const std::vector<std::pair<std::string, Tensor>>& outputs,
               const std::filesystem::path& dir);
HostCase load_case(const std::filesystem::path& dir, const std::string& op);

}  // namespace ejk::cli
