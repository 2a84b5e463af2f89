#include "host_case.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>

#include "ejk/core/error.h"
#include "ejk/half.h"
#include "files.h"
#include "npy.h"
#include "params_json.h"

namespace ejk::cli {
namespace {

template <class T>
T* find_named(std::vector<std::pair<std::string, T>>& v, std::string_view name) {
  auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.first == name; });
  return it == v.end() ? nullptr : &it->second;
}

nlohmann::json scalar_json(const Scalar& s) {
  return std::visit([](const auto& v) -> nlohmann::json {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::monostate>) return nullptr;
    else if constexpr (std::is_same_v<V, std::array<int64_t, 2>>) return nlohmann::json::array({v[0], v[1]});
    else return v;
  }, s);
}

bool takes_op_dtype(const OpTensorInfo& t) {
  return t.dtypes.find("dtype") != std::string::npos;
}

// The input files present in `dir`, headers read and checked, data not yet read.
struct InputFile {
  std::string name;
  std::unique_ptr<NpyFile> file;
  DType dtype;  // the tensor's dtype once loaded (the op's dtype for its float32-saved inputs)
};

std::vector<InputFile> open_inputs(const std::filesystem::path& dir, const OpInfo& info, DType op_dtype) {
  std::vector<InputFile> out;
  for (const OpTensorInfo& t : info.tensors) {
    const auto path = dir / (t.name + ".npy");
    std::error_code ec;
    if (t.output || !std::filesystem::exists(std::filesystem::symlink_status(path, ec))) continue;
    auto file = std::make_unique<NpyFile>(path);
    // Floating inputs of the op's dtype were saved as float32 holding the exact values.
    const DType stored = file->layout().dtype;
    const DType dtype = takes_op_dtype(t) && stored == DType::f32 ? op_dtype : stored;
    out.push_back({t.name, std::move(file), dtype});
  }
  return out;
}

// The inputs as views without data, with the scalars: the engine's binding checks their
// dtypes, shapes and the scalars before a byte of data is read or converted.
void check_shapes(const std::string& op, const std::vector<InputFile>& files, const HostCase& c) {
  Args a;
  for (const InputFile& f : files) {
    const Dims shape(f.file->layout().shape);
    try {
      a.set(f.name, TensorView{nullptr, f.dtype, Device{}, shape, contiguous_strides(shape)});
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--load {}: {}", f.name, e.what()));
    }
  }
  for (const auto& [name, v] : c.scalars) a.set(name, v);
  output_specs(op, a);
}

}  // namespace

const Tensor* HostCase::input(std::string_view name) const {
  return find_named(const_cast<std::vector<std::pair<std::string, Tensor>>&>(inputs), name);
}

const Scalar* HostCase::scalar(std::string_view name) const {
  return find_named(const_cast<std::vector<std::pair<std::string, Scalar>>&>(scalars), name);
}

void HostCase::set(std::string name, Scalar v) {
  if (Scalar* s = find_named(scalars, name)) *s = v;
  else scalars.emplace_back(std::move(name), v);
}

Args HostCase::args() const {
  Args a;
  for (const auto& [name, t] : inputs) a.set(name, t.view());
  for (const auto& [name, s] : scalars) a.set(name, s);
  return a;
}

void fill_normal(Tensor& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> nd(0.0f, stddev);
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = nd(rng);
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint16_t>()[i] = float_to_bf16(nd(rng));
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint16_t>()[i] = float_to_f16(nd(rng));
      return;
    default:
      throw InvalidArgument(fmt::format("random values of dtype {}: the op's case must fill them", dtype_name(t.dtype())));
  }
}

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  if (t.dtype() != DType::bf16 && t.dtype() != DType::f16)
    throw InvalidArgument(fmt::format("to_f32: {} is not a 16-bit float tensor", t.view().describe()));
  Tensor out = Tensor::empty(t.shape(), DType::f32);
  const auto* h = t.data_as<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data_as<float>()[i] = t.dtype() == DType::bf16 ? bf16_to_float(h[i]) : f16_to_float(h[i]);
  return out;
}

Tensor from_f32(const Tensor& t, DType dtype) {
  if (t.dtype() != DType::f32 || (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16))
    throw InvalidArgument(fmt::format("from_f32: {} to {}: expected a float32 tensor and bf16, f16 or f32",
                                      t.view().describe(), dtype_name(dtype)));
  if (dtype == DType::f32) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data_as<float>()[i];
    out.data_as<uint16_t>()[i] = dtype == DType::bf16 ? float_to_bf16(v) : float_to_f16(v);
  }
  return out;
}

std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::f32: out[i] = t.data_as<float>()[i]; break;
      case DType::f64: out[i] = t.data_as<double>()[i]; break;
      case DType::bf16: out[i] = bf16_to_float(t.data_as<uint16_t>()[i]); break;
      case DType::f16: out[i] = f16_to_float(t.data_as<uint16_t>()[i]); break;
      case DType::i32: out[i] = t.data_as<int32_t>()[i]; break;
      case DType::i64: out[i] = double(t.data_as<int64_t>()[i]); break;
      case DType::u8: out[i] = t.data_as<uint8_t>()[i]; break;
    }
  }
  return out;
}

void save_case(const HostCase& c, const std::vector<std::pair<std::string, Tensor>>& outputs,
               const std::filesystem::path& dir) {
  const WriteDir out(dir, "--save");
  auto save = [&](const std::string& name, const Tensor& t) {
    const bool half = t.dtype() == DType::bf16 || t.dtype() == DType::f16;
    WriteFile f(out, name + ".npy");
    save_npy(f, half ? to_f32(t) : t);
    f.close();
  };
  for (const auto& [name, t] : c.inputs) save(name, t);
  for (const auto& [name, t] : outputs) save(name, t);
  nlohmann::json p;
  p["op"] = c.op;
  p["dtype"] = std::string(dtype_name(c.dtype));
  p["seed"] = c.seed;
  p["scalars"] = nlohmann::json::object();
  for (const auto& [name, s] : c.scalars) p["scalars"][name] = scalar_json(s);
  WriteFile f(out, "params.json");
  f.write(p.dump(2) + "\n");
  f.close();
}

HostCase load_case(const std::filesystem::path& dir, const std::string& op) {
  const std::string file = (dir / "params.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(dir / "params.json", ec)))
    throw InvalidArgument(fmt::format("--load {}: params.json not found", dir.string()));
  const nlohmann::json p = parse_params(read_small_file(file, kMaxParamsBytes, "--load"), file);
  HostCase c;
  c.op = op;
  if (p.contains("op") && (!p["op"].is_string() || p["op"].get<std::string>() != op))
    throw InvalidArgument(fmt::format("--load {}: op is {}, expected \"{}\"", file, excerpt(p["op"]), op));
  if (!p.contains("dtype") || !p["dtype"].is_string())
    throw InvalidArgument(fmt::format("--load {}: dtype must be a string such as \"bf16\"", file));
  c.dtype = parse_dtype(p["dtype"].get<std::string>());
  if (p.contains("seed")) {
    if (!p["seed"].is_number_unsigned())
      throw InvalidArgument(fmt::format("--load {}: seed must be a non-negative integer, got {}", file, excerpt(p["seed"])));
    c.seed = p["seed"].get<uint64_t>();
  }
  const OpInfo info = describe_op(op);
  static const nlohmann::json kNoScalars = nlohmann::json::object();
  const nlohmann::json& s = p.contains("scalars") ? p["scalars"] : kNoScalars;
  if (!s.is_object()) throw InvalidArgument(fmt::format("--load {}: scalars must be an object", file));
  for (const auto& [name, value] : s.items()) {
    auto it = std::find_if(info.scalars.begin(), info.scalars.end(), [&](const OpScalarInfo& x) { return x.name == name; });
    if (it == info.scalars.end())
      throw InvalidArgument(fmt::format("--load {}: {} has no scalar '{}'", file, op,
                                        name.size() > 40 ? name.substr(0, 37) + "..." : name));
    c.set(name, scalar_from_json(value, *it, file));
  }
  std::vector<InputFile> files = open_inputs(dir, info, c.dtype);
  check_shapes(op, files, c);
  for (InputFile& f : files) {
    Tensor values = Tensor::empty(f.file->layout().shape, f.file->layout().dtype);
    f.file->read_data(values.data());
    if (values.dtype() != f.dtype) values = from_f32(values, f.dtype);
    c.inputs.emplace_back(f.name, std::move(values));
  }
  // Now the values: host-resident metadata (cum_seqlens) is checked by the op's own rules.
  check_args(op, c.args());
  return c;
}

}  // namespace ejk::cli
