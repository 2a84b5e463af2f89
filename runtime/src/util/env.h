// Strict reading of environment variables. An unset or empty variable means "use the default";
// anything else must parse completely, or an ejk::InvalidArgument names the variable, its value
// and what is accepted. A typo in EJK_DISABLE_JIT=yse must not silently mean "no".
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace ejk::util {

// The value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

// A decimal integer in [min, max] (optional leading '-', nothing else), or `fallback` when unset.
int64_t env_int(const char* name, int64_t min, int64_t max, int64_t fallback);

// 0/1/true/false/yes/no/on/off (any case), or `fallback` when unset.
bool env_bool(const char* name, bool fallback);

// A path (made absolute against the working directory), or nullopt when unset.
std::optional<std::filesystem::path> env_path(const char* name);

}  // namespace ejk::util
