// One variant store for every backend and op: a key becomes something that runs, from the
// first source that has it, in this order:
//   1. built in (the AOT tables the generator wrote into this library),
//   2. bundles (bundle/bundle_set.h: EJK_BUNDLE_PATH, then ejk::load_bundle), an entry only where
//      its content hash is the one computed here for the key and it passes every check,
//   3. the disk cache (objects and cubins compiled before, by this or another process),
//   4. a compile: CPU through Clang + ORC, CUDA through NVRTC (EJK_DISABLE_JIT=1: an error
//      naming the key).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bundle/format.h"
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

// The arch a CUDA key's cubin is compiled for on a device of compute capability major.minor:
// an arch-specific target ("sm90a") exactly; a portable one ("sm80") its own where the device
// has its major version, else the device's. CUDA builds only.
std::string cubin_arch(const VariantKey& key, int major, int minor);

// A key's binary as the run-time path makes it, never the built-in one nor a bundle's: from
// the disk cache, else compiled (CPU: clang for the key's target; CUDA: NVRTC for `arch`, no
// GPU needed) and cached. What `ejk bundle build` ships, with what identifies it.
struct Binary {
  std::vector<uint8_t> bytes;
  std::string arch;      // CPU: the -march; CUDA: `arch`
  std::string compiler;  // the compiler identity in `hash`
  std::string hash;      // the content hash the runtime computes for the key
  VariantSource source = VariantSource::jit;  // cache or jit
  double compile_ms = 0;
};
Binary compile_binary(const OpSchema& schema, const VariantKey& key, const std::string& arch);

// The content hash a bundle entry for `key` must carry to be used here (its source, the
// kernel headers, the generator, and the compiler: clang for CPU keys, NVRTC for CUDA ones or
// the entry's own where NVRTC is not installed); nullopt where this build cannot tell (CPU
// keys without the CPU JIT, which could not load them either).
std::optional<std::string> bundle_hash_here(const OpSchema& schema, const VariantKey& key,
                                            const bundle::EntryMeta& entry);

}  // namespace ejk::engine
