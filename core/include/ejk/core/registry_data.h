// The contract between the generator and the runtime: what the generated registry.cpp defines.
// The generator writes the AOT instance files and this table in one run, so the two cannot drift.
#pragma once
#include <cstddef>

namespace ejk::generated {

// A text file carried inside the library: specs, templates and kernel headers, so the JIT
// renders and compiles exactly what the AOT build compiled, with no files needed at run time.
struct EmbeddedFile {
  const char* path;  // specs/flash_attention.yaml, templates/..., ejk/kernels/common/base.h
  const char* text;
  size_t size;
};

// Every CPU kernel shares one ABI: a params struct and a half-open range of tasks.
using CpuTaskFn = void (*)(const void* params, long long task_begin, long long task_end);

struct CpuAotEntry {
  const char* key;  // canonical variant key
  CpuTaskFn fn;
};

// A CUDA variant compiled by nvcc at build time, embedded as a cubin.
struct CudaAotEntry {
  const char* key;     // canonical variant key (its target names the arch, e.g. sm90a)
  const char* symbol;  // kernel entry point (symbol_name(key))
  const unsigned char* image;
  size_t size;
};

extern const EmbeddedFile kSpecs[];
extern const size_t kNumSpecs;
extern const EmbeddedFile kTemplates[];
extern const size_t kNumTemplates;
extern const EmbeddedFile kKernelHeaders[];  // paths relative to kernels/ (the include root)
extern const size_t kNumKernelHeaders;
extern const CpuAotEntry kCpuAot[];
extern const size_t kNumCpuAot;
extern const CudaAotEntry kCudaAot[];
extern const size_t kNumCudaAot;
extern const char* const kGeneratorVersion;

}  // namespace ejk::generated
