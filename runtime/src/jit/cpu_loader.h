// Loads CPU kernel objects into one process-wide LLVM ORC LLJIT and returns entry points.
// Implemented in the CPU JIT plugin (cpu_loader.cpp) and, in libejk, by calls into it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ejk::jit {

class CpuLoader {
 public:
  // One per process, created on first use (thread-safe). Throws BackendUnavailable when the
  // library was built without EJK_ENABLE_ORC_JIT, the plugin is not installed or LLVM cannot
  // target this host.
  static CpuLoader& instance();

  // Links the object (validated by the cache before it gets here) into its own JITDylib, so
  // several objects may define the same symbol, and returns the address of `symbol`. Symbols
  // the object does not define (memcpy, expf, ...) resolve against the running process.
  // Loading the same bytes again returns the same address without linking twice.
  // Code stays mapped until the process exits. Objects must not need static constructors
  // (freestanding kernels have none); one that has them is rejected with CompileError.
  // Throws CompileError naming the symbol when linking or the lookup fails.
  void* load(std::span<const uint8_t> object, const std::string& symbol);

  ~CpuLoader();
  CpuLoader(const CpuLoader&) = delete;
  CpuLoader& operator=(const CpuLoader&) = delete;

 private:
  CpuLoader();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ejk::jit
