// Names inside the cache: the backend, key and hash arguments (checked before they become path
// components) and the file names made of them.
#pragma once
#include <string>
#include <string_view>

namespace ejk::cache::names {

inline constexpr size_t kFileHashChars = 16;
inline constexpr const char* kEntrySuffix = ".bin";
inline constexpr const char* kLockSuffix = ".lock";

// Each throws ejk::InvalidArgument naming the argument and the expected form.
void check_backend(const std::string& backend);  // [a-z0-9_]+
void check_key(const std::string& key);          // [A-Za-z0-9._-]{1,200}, not starting with '.'
void check_hash(const std::string& hash_hex);    // 16-128 lowercase hex

// "<key>-<hash16>.bin"
std::string entry_file_name(const std::string& key, const std::string& hash_hex);

// "<key>-<hash16>.bin" -> {key, hash16}; false for other names. The key may contain '-'.
bool split_entry_name(const std::string& file_name, std::string& key, std::string& hash_prefix);

// `text` with every byte outside printable ASCII as \xNN, so a name or header field read from
// disk cannot put terminal escape sequences into `cache ls` / `cache verify` output.
std::string printable(std::string_view text);

// True for names a backend directory may hold besides entries and temp files.
bool is_lock_name(const std::string& file_name);
bool is_backend_name(const std::string& name);

}  // namespace ejk::cache::names
