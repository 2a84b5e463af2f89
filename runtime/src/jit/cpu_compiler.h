// In-process C++ compiler for CPU variants: rendered kernel source -> ELF relocatable object.
//
// Clang runs as a library (no external process) on an in-memory file system: the source and
// its headers come only from the CpuSource, plus clang's builtin headers (immintrin.h and
// friends). Kernel headers are freestanding, so no libstdc++ is parsed and a compile stays
// well under a second.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ejk::jit {

struct CpuSource {
  std::string name;  // e.g. "<key>.cpp": the main file's name in diagnostics
  std::string text;  // the rendered template
  // include path (as written in #include "...") -> file text
  std::vector<std::pair<std::string, std::string>> headers;
  // Empty: this host's CPU with its detected features (like -march=native). Otherwise an LLVM
  // CPU name as given to -march= ("x86-64-v4", "x86-64-v3", "x86-64", "sapphirerapids"), so a
  // variant keyed for a narrower target is compiled for that target, as its AOT build is.
  std::string march{};
};

// Implemented twice: by Clang in the CPU JIT plugin (cpu_compiler.cpp), and in libejk by calls
// into that plugin (cpu_jit_client.cpp), which libejk loads on first need.
class CpuCompiler {
 public:
  // False when the library was built without EJK_ENABLE_ORC_JIT or the plugin (or the LLVM 19
  // it needs) is not installed; then instance() throws BackendUnavailable saying which.
  static bool available();
  static std::string unavailable_reason();  // empty when available()
  // One per process, created on first use (thread-safe). compile() may run on several threads.
  static CpuCompiler& instance();

  // Everything besides the source that determines the object: clang version, target triple,
  // host CPU name, CPU features and the compile flags. Part of every CPU cache hash, so a
  // cached object built on another machine or by another clang is never loaded.
  const std::string& identity() const { return identity_; }
  // The same for sources with a non-empty CpuSource::march (host features do not apply).
  std::string identity_for_march(const std::string& march) const;
  const std::string& host_cpu() const { return cpu_; }
  const std::vector<std::string>& host_features() const { return features_; }  // "+avx2", "-sse4a"
  const std::string& target_triple() const { return triple_; }

  // Compiles at -O3 for this host's CPU (or src.march), -std=c++20, -fno-math-errno, -ffp-contract=fast,
  // without exceptions or RTTI, into position-independent ELF object bytes.
  // Throws CompileError with clang's diagnostics (first 40 lines) on failure, and
  // InvalidArgument for a header path that is absolute or leaves the include root.
  std::vector<uint8_t> compile(const CpuSource& src) const;

 private:
  CpuCompiler();
  std::string triple_, cpu_, identity_, resource_dir_;
  std::vector<std::string> features_;
  std::vector<std::string> flags_;  // cc1 flags shared by every compile, target excluded

  std::vector<std::string> compile_args(const CpuSource& src, const std::string& main_path) const;
};

}  // namespace ejk::jit
