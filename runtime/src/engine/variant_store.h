// One variant store for every backend and op: a key becomes something that runs, from the
// first source that has it, in this order:
//   1. built in (the AOT tables the generator wrote into this library),
//   2. the disk cache (objects and cubins compiled before, by this or another process),
//   3. a compile: CPU through Clang + ORC, CUDA through NVRTC (EJK_DISABLE_JIT=1: an error
//      naming the key).
// Bundles (issue: shipped precompiled kernels) slot in between 1 and 2.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ejk/core/registry_data.h"
#include "ejk/core/schema.h"
#include "ejk/types.h"
#include "ejk/tensor.h"

namespace ejk::cuda {
class LoadedKernel;
}

namespace ejk::engine {

struct Variant {
  VariantSource source = VariantSource::aot;
  double compile_ms = 0, load_ms = 0;
  std::string cache_path;                     // where a compiled variant is cached
  generated::CpuTaskFn cpu = nullptr;         // CPU keys
  std::shared_ptr<cuda::LoadedKernel> cuda;   // CUDA keys: loaded in the device's context
};

// The variant of `key` ready to run on `device`; memoized per (device, key), thread-safe, and a
// key is compiled at most once per process (and per machine, through the cache's lock).
Variant acquire_variant(const OpSchema& schema, const VariantKey& key, Device device);

// A CUDA variant's cubin for `arch` ("sm_90"; empty: the one its key's target names), built in
// where the build has it for that arch, else from the disk cache or NVRTC; needs no GPU
// (`ejk compile`).
struct Cubin {
  std::vector<uint8_t> bytes;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0, load_ms = 0;
  std::string cache_path;
  int registers = -1;
  int64_t static_shared_bytes = -1;  // of the entry; the dynamic part comes at launch
};
Cubin acquire_cubin(const OpSchema& schema, const VariantKey& key, std::string arch = {});

// Whether `key` is in this library's AOT tables.
bool is_builtin(const std::string& key);

}  // namespace ejk::engine
