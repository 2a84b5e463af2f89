// params.json of a --save folder, read as untrusted text: size and nesting bounded before the
// parser sees it (nothing recursive ever walks a deep value), a key given twice refused, only
// the known top-level keys, and each scalar converted to the type its spec declares. Errors are
// InvalidArgument naming the file and the key, quoting at most a short excerpt of a value.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ejk/op.h"

namespace ejk::cli {

inline constexpr uint64_t kMaxParamsBytes = uint64_t{1} << 20;
inline constexpr int kMaxJsonDepth = 8;  // params.json is two levels deep; a window pair makes three

// A value for an error message: short, whatever the file holds.
std::string excerpt(const nlohmann::json& j);
// InvalidArgument when `text` nests arrays and objects deeper than kMaxJsonDepth.
void check_json_depth(std::string_view text, const std::string& file);
// The file as an object with only the keys op, dtype, seed and scalars.
nlohmann::json parse_params(const std::string& text, const std::string& file);
// A scalars.<name> value as the type `info` declares (null: the spec's default).
Scalar scalar_from_json(const nlohmann::json& j, const OpScalarInfo& info, const std::string& file);

}  // namespace ejk::cli
