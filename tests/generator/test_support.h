// Helpers shared by the generator tests: a fresh random source, temporary directories, running
// ejk-gen as a process, and where the repository's spec inputs are.
#pragma once
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "ejk/core/schema.h"
#include "files.h"

namespace ejk::test {

namespace fs = std::filesystem;

inline fs::path source_root() { return fs::path(EJK_SOURCE_ROOT); }

// The repository's specs/targets.yaml, where the specs' named targets come from.
inline const TargetTable* target_table() {
  static const TargetTable table = [] {
    const fs::path path = source_root() / "specs" / std::string(TargetTable::kFileName);
    return TargetTable::parse(gen::read_file(path), path.string());
  }();
  return &table;
}

// Seeded afresh each run; the seed is printed so a failure can be replayed by hand.
inline std::mt19937_64& rng() {
  static std::mt19937_64 gen = [] {
    const uint64_t seed = std::random_device{}();
    std::fprintf(stderr, "generator tests: random seed %llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return gen;
}

inline int64_t random_int(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng());
}

// A directory removed when the object dies.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            fmt::format("ejk-gen-test-{}-{:016x}", ::getpid(), static_cast<uint64_t>(rng()()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, stderr folded into stdout.
inline ProcessResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  ProcessResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs ejk-gen with `args` (already shell-quoted where needed) from the repository root.
inline ProcessResult run_ejk_gen(const std::string& args) {
  return run_command(fmt::format("cd '{}' && '{}' {}", source_root().string(), EJK_GEN_EXE, args));
}

}  // namespace ejk::test
