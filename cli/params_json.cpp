#include "params_json.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "ejk/core/error.h"

namespace ejk::cli {

std::string excerpt(const nlohmann::json& j) {
  std::string text = j.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

Scalar scalar_from_json(const nlohmann::json& j, const OpScalarInfo& info, const std::string& file) {
  auto bad = [&]() -> InvalidArgument {
    return InvalidArgument(fmt::format("--load {}: scalars.{} must be {} (or null), got {}", file, info.name,
                                       info.type == "i64[2]" ? "a pair [left, right] of int64 integers"
                                                             : "a " + info.type,
                                       excerpt(j)));
  };
  // An integer above INT64_MAX is stored unsigned; get<int64_t> would wrap it.
  auto is_i64 = [](const nlohmann::json& x) {
    return x.is_number_integer() && (!x.is_number_unsigned() || x.get<uint64_t>() <= uint64_t(INT64_MAX));
  };
  if (j.is_null()) return std::monostate{};
  if (info.type == "bool") { if (!j.is_boolean()) throw bad(); return j.get<bool>(); }
  if (info.type == "i64") { if (!is_i64(j)) throw bad(); return j.get<int64_t>(); }
  if (info.type == "f32" || info.type == "f64") { if (!j.is_number()) throw bad(); return j.get<double>(); }
  if (!j.is_array() || j.size() != 2 || !is_i64(j[0]) || !is_i64(j[1])) throw bad();
  return std::array<int64_t, 2>{j[0].get<int64_t>(), j[1].get<int64_t>()};
}

void check_json_depth(std::string_view text, const std::string& file) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth > kMaxJsonDepth)
        throw InvalidArgument(fmt::format("--load {}: JSON nested deeper than {} levels", file, kMaxJsonDepth));
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
}

// A key given twice in one object is refused: which one would count is a guess.
nlohmann::json parse_params(const std::string& text, const std::string& file) {
  check_json_depth(text, file);
  std::vector<std::set<std::string>> keys;  // the keys of each open object
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    else if (ev == E::object_end && !keys.empty()) keys.pop_back();
    else if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      throw InvalidArgument(fmt::format("--load {}: key {} is given twice", file, excerpt(parsed)));
    return true;
  };
  nlohmann::json p = nlohmann::json::parse(text, cb, /*allow_exceptions=*/false);
  if (p.is_discarded() || !p.is_object()) throw InvalidArgument(fmt::format("--load {}: not a JSON object", file));
  for (const auto& [key, value] : p.items())
    if (key != "op" && key != "dtype" && key != "seed" && key != "scalars")
      throw InvalidArgument(fmt::format("--load {}: unknown key {} (expected op, dtype, seed, scalars)", file,
                                        excerpt(nlohmann::json(key))));
  return p;
}

}  // namespace ejk::cli
