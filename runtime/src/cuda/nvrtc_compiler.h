// CUDA C++ -> cubin through NVRTC, loaded at run time with dlopen (libnvrtc.so.13, then
// libnvrtc.so, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64), so libejk runs without a CUDA
// toolkit and only run-time compilation needs one.
//
// Headers come from the caller (the kernel headers embedded in the library), handed to NVRTC
// as in-memory files: a JIT compile reads nothing from disk but NVRTC itself.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ejk::cuda {

struct CudaSource {
  std::string name;  // the main file's name in diagnostics, e.g. "<key>.cu"
  std::string text;  // the rendered template
  // include path (as written in #include "...") -> file text
  std::vector<std::pair<std::string, std::string>> headers;
};

// Resources of one kernel, from ptxas's report (-v). -1 where the report did not say.
struct KernelResources {
  int registers = -1;
  int stack_bytes = -1;
  int spill_store_bytes = -1, spill_load_bytes = -1;
  int static_smem_bytes = -1;
};

struct CubinResult {
  std::vector<uint8_t> cubin;
  std::string log;            // NVRTC's log (ptxas report included)
  // Of `symbol`: registers, static smem (and the stack frame when the log lacks it) from the
  // cubin itself; spills from the ptxas report, which NVRTC does not always put in the log
  // when several programs compile concurrently (seen on the H200 machine, 16 threads), so
  // those may be -1.
  KernelResources resources;
  double compile_ms = 0;
};

// "sm90a" (a key's target) -> "sm_90a" (NVRTC's --gpu-architecture value).
// InvalidArgument for anything not spelled sm<digits>[a].
std::string nvrtc_arch(std::string_view target);

// Parses the ptxas -v lines of one entry function out of a compile log.
KernelResources parse_ptxas_report(std::string_view log, std::string_view symbol);

// Registers, stack frame and static shared memory of `symbol` read from the cubin itself (the
// EIATTR_REGCOUNT and EIATTR_FRAME_SIZE records of its .nv.info section, the size of its
// .nv.shared section, 0 without one). Fields it cannot find stay -1;
// InvalidArgument if the bytes are not a 64-bit ELF.
KernelResources cubin_resources(const std::vector<uint8_t>& cubin, std::string_view symbol);

class NvrtcCompiler {
 public:
  // The loaded compiler, or nullptr with *why set. Loads once per process.
  static const NvrtcCompiler* load(std::string* why = nullptr);
  // The loaded compiler; BackendUnavailable naming what was tried otherwise.
  static const NvrtcCompiler& get();

  // "nvrtc 13.0": part of every CUDA cache hash, so a cubin from another compiler is rebuilt.
  const std::string& identity() const { return identity_; }

  // Compiles for `arch` ("sm_80", "sm_90a") with -std=c++20 -O3 and the ptxas report on, and
  // returns the cubin. Thread-safe (one NVRTC program per call).
  // Throws CompileError with the first 40 lines of NVRTC's log on failure.
  CubinResult compile(const CudaSource& src, std::string_view arch, std::string_view symbol) const;

  struct Api;  // NVRTC's entry points; defined in nvrtc_compiler.cpp only

 private:
  NvrtcCompiler(const Api* api, std::string identity, std::string cuda_include)
      : api_(api), identity_(std::move(identity)), cuda_include_(std::move(cuda_include)) {}
  const Api* api_;
  std::string identity_;
  std::string cuda_include_;  // -I for <cuda_*.h> when a toolkit is found, else empty
};

}  // namespace ejk::cuda
