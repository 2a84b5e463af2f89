// Helpers shared by the runtime tests: a scratch directory, scoped environment variables and
// fresh random data.
#pragma once
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace ejk::test {

// A new directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ejk-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets (or unsets, with nullopt) an environment variable and restores it at scope exit.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = ::getenv(name_.c_str())) old_ = old;
    apply(value);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { apply(old_); }

 private:
  void apply(const std::optional<std::string>& value) {
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh seed per run; tests print it so a failure can be replayed.
inline uint64_t fresh_seed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Lowercase hex of the requested length.
inline std::string random_hex(std::mt19937_64& rng, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n, '0');
  for (auto& c : out) c = kDigits[rng() & 0xf];
  return out;
}

}  // namespace ejk::test
