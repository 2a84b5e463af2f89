// Fuzz target: what `ejk run OP --load DIR` reads before the engine's binding sees it. The input
// is a folder in one buffer: params.json, then .npy files, each part after a line "--npy--".
// params.json goes through the bounded parser and each scalar through flash_attention's scalar
// types; each .npy through the header reader. InvalidArgument is the only acceptable failure.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/core/error.h"
#include "npy.h"
#include "params_json.h"

namespace {

// The types a spec's scalar may have, under flash_attention's names.
const std::vector<ejk::OpScalarInfo> kScalars = {
    {"causal", "bool", "", ""},          {"max_seqlen_q", "i64", "", ""}, {"softmax_scale", "f32", "", ""},
    {"sliding_window", "i64[2]", "", ""}, {"eps", "f64", "", ""}};

void load(const std::string& params, const std::vector<std::string_view>& files) {
  const nlohmann::json p = ejk::cli::parse_params(params, "fuzz/params.json");
  if (p.contains("scalars") && p["scalars"].is_object())
    for (const auto& [name, value] : p["scalars"].items())
      for (const ejk::OpScalarInfo& info : kScalars)
        if (info.name == name) ejk::cli::scalar_from_json(value, info, "fuzz/params.json");
  for (std::string_view f : files)
    ejk::cli::parse_npy_header(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.data()), f.size()),
                               f.size(), "fuzz/x.npy");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSep = "\n--npy--\n";
  std::vector<std::string_view> parts;
  for (size_t at = 0;;) {
    const size_t next = all.find(kSep, at);
    parts.push_back(all.substr(at, next == all.npos ? all.npos : next - at));
    if (next == all.npos) break;
    at = next + kSep.size();
  }
  try {
    load(std::string(parts.front()), std::vector<std::string_view>(parts.begin() + 1, parts.end()));
  } catch (const ejk::InvalidArgument&) {
  }
  return 0;
}
