#include "cache/entry_names.h"

#include <algorithm>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::cache::names {
namespace {

// Keeps "<key>-<hash16>.bin.tmp.<pid>.<random>" under the usual 255-byte name limit.
constexpr size_t kMaxKeyLength = 200;

bool is_name_char(char c, bool allow_dot_dash) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') return true;
  if (!allow_dot_dash) return false;
  return (c >= 'A' && c <= 'Z') || c == '.' || c == '-';
}

bool is_key(const std::string& key) {
  return !key.empty() && key.size() <= kMaxKeyLength && key.front() != '.' &&
         std::all_of(key.begin(), key.end(), [](char c) { return is_name_char(c, true); });
}

}  // namespace

bool is_backend_name(const std::string& name) {
  return !name.empty() &&
         std::all_of(name.begin(), name.end(), [](char c) { return is_name_char(c, false); });
}

void check_backend(const std::string& backend) {
  if (!is_backend_name(backend))
    throw InvalidArgument(fmt::format(
        "cache backend \"{}\": expected a non-empty name of [a-z0-9_] such as \"cpu\"",
        printable(backend)));
}

void check_key(const std::string& key) {
  if (!is_key(key))
    throw InvalidArgument(fmt::format(
        "cache key \"{}\": expected 1-{} characters of [A-Za-z0-9._-], not starting with '.'",
        printable(key), kMaxKeyLength));
}

void check_hash(const std::string& hash_hex) {
  if (hash_hex.size() < kFileHashChars || hash_hex.size() > 128 || !util::is_lower_hex(hash_hex))
    throw InvalidArgument(fmt::format(
        "cache hash \"{}\": expected 16-128 lowercase hex characters (e.g. from "
        "util::hash_strings_hex)",
        printable(hash_hex)));
}

std::string entry_file_name(const std::string& key, const std::string& hash_hex) {
  return fmt::format("{}-{}{}", key, hash_hex.substr(0, kFileHashChars), kEntrySuffix);
}

bool split_entry_name(const std::string& file_name, std::string& key, std::string& hash_prefix) {
  if (!file_name.ends_with(kEntrySuffix)) return false;
  std::string stem = file_name.substr(0, file_name.size() - std::string_view(kEntrySuffix).size());
  size_t dash = stem.rfind('-');
  if (dash == std::string::npos || dash == 0) return false;
  key = stem.substr(0, dash);
  hash_prefix = stem.substr(dash + 1);
  return is_key(key) && hash_prefix.size() == kFileHashChars && util::is_lower_hex(hash_prefix);
}

std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out.push_back(c);
    else out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
  }
  return out;
}

bool is_lock_name(const std::string& file_name) {
  std::string key, hash_prefix;
  if (!file_name.ends_with(kLockSuffix)) return false;
  std::string as_entry = file_name.substr(0, file_name.size() - std::string_view(kLockSuffix).size());
  return split_entry_name(as_entry + kEntrySuffix, key, hash_prefix);
}

}  // namespace ejk::cache::names
