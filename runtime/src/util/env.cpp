#include "util/env.h"

#include <array>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "ejk/core/checked.h"
#include "ejk/core/error.h"

namespace ejk::util {
namespace fs = std::filesystem;
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equals_lower(std::string_view text, std::string_view word) {
  if (text.size() != word.size()) return false;
  for (size_t i = 0; i < text.size(); ++i)
    if (lower(text[i]) != word[i]) return false;
  return true;
}

}  // namespace

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int64_t env_int(const char* name, int64_t min, int64_t max, int64_t fallback) {
  std::optional<std::string> text = env_string(name);
  if (!text) return fallback;
  if (auto value = parse_decimal(*text, min, max)) return *value;
  throw InvalidArgument(fmt::format("{}=\"{}\": expected a decimal integer from {} to {}", name,
                                    *text, min, max));
}

bool env_bool(const char* name, bool fallback) {
  std::optional<std::string> text = env_string(name);
  if (!text) return fallback;
  static constexpr std::array<std::string_view, 4> kTrue = {"1", "true", "yes", "on"};
  static constexpr std::array<std::string_view, 4> kFalse = {"0", "false", "no", "off"};
  for (std::string_view w : kTrue)
    if (equals_lower(*text, w)) return true;
  for (std::string_view w : kFalse)
    if (equals_lower(*text, w)) return false;
  throw InvalidArgument(fmt::format(
      "{}=\"{}\": expected 1, 0, true, false, yes, no, on or off", name, *text));
}

std::optional<fs::path> env_path(const char* name) {
  std::optional<std::string> text = env_string(name);
  if (!text) return std::nullopt;
  // Quoted, '~' reaches us unexpanded; taken as a relative path it would make a folder "~".
  if (!text->empty() && text->front() == '~')
    throw InvalidArgument(fmt::format("{}=\"{}\": '~' is expanded only by a shell, not in quotes; give the "
                                      "full path", name, *text));
  fs::path path(*text);
  if (path.is_relative()) {
    std::error_code ec;
    fs::path absolute = fs::absolute(path, ec);
    if (ec)
      throw InvalidArgument(fmt::format("{}=\"{}\": a relative path, and the working directory "
                                        "cannot be read ({})", name, *text, ec.message()));
    path = absolute;
  }
  return path.lexically_normal();
}

}  // namespace ejk::util
