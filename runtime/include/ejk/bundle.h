// Kernel bundles (.ejkb): precompiled variants (CPU objects, cubins) in one file, built once on
// a build machine (`ejk bundle build`, no GPU needed) and used by every process that registers
// it: a variant not built into the library comes from the first registered bundle that has it
// for this library's sources, generator and compiler, before the disk cache and the JIT, so a
// process with EJK_DISABLE_JIT=1 runs everything its bundles hold. Format and decisions:
// docs/design/bundles.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ejk/export.h"

namespace ejk {

// Registers a bundle file, or every *.ejkb file of a directory (by name), after those registered
// before: EJK_BUNDLE_PATH's (colon-separated files or directories, read once, at the first call
// that needs a variant or at this one), then each load_bundle's. Loading the same file again
// adds nothing. Returns the number of usable entries added; an entry whose record is damaged is
// reported on stderr and left out, one whose payload is damaged when a call first needs it.
// InvalidArgument naming the file when it cannot be used as a whole: not there, not a bundle, a
// damaged header, a newer format version (naming both), a file others may write.
EJK_API size_t load_bundle(const std::filesystem::path& path);

struct BundleEntryInfo {
  std::string backend, key, target, arch;  // arch: CPU, the -march; CUDA, the cubin's (sm_90a)
  std::string compiler;                    // the compiler identity the entry was built with
  std::string content_hash;
  uint64_t size = 0, stored_size = 0;      // decompressed, compressed
  bool valid = true;                       // false: `problem` says why
  std::string problem;
  // inspect_bundle(verify): whether the entry's content hash is the one this library computes
  // for its key (else the runtime skips it as stale); nullopt where this build cannot tell.
  std::optional<bool> current;
  std::filesystem::path extracted;         // extract_bundle: where it was written
};

struct BundleInfo {
  std::filesystem::path path;
  uint32_t format_version = 0;
  std::string generator_version;
  uint64_t file_size = 0;
  std::vector<BundleEntryInfo> entries;  // in manifest order
  // Damage outside any one entry that leaves the others usable (a truncated file).
  std::vector<std::string> problems;
  bool intact() const {  // no problem, every entry valid
    for (const BundleEntryInfo& e : entries)
      if (!e.valid) return false;
    return problems.empty();
  }
};

// The header and manifest of a bundle; with verify, also every entry's payload (both checksums,
// decompression, the payload check the runtime makes before loading) and whether it is current
// for this library. InvalidArgument when the bundle cannot be read as a whole.
EJK_API BundleInfo inspect_bundle(const std::filesystem::path& file, bool verify);

// Writes every intact entry to `dir` (created if missing) as <key>.o (CPU) or <key>.<arch>.cubin
// (CUDA); damaged entries are reported in the result and not written.
EJK_API BundleInfo extract_bundle(const std::filesystem::path& file, const std::filesystem::path& dir);

struct BundleBuildProgress {
  size_t done = 0, total = 0;  // done == 0: the build starts (jobs, jobs_reason set)
  std::string key, arch;
  std::string source;          // "jit" (compiled now) or "cache" (compiled before)
  double seconds = 0;          // this entry's compile
  int jobs = 0;
  std::string jobs_reason;     // how the number of parallel compiles was chosen
};

struct BundleBuildRequest {
  std::filesystem::path out;
  std::string variants;           // regex searched in each key of the specs' AOT sets ("" : none)
  std::vector<std::string> keys;  // exact keys besides, any the specs allow (e.g. head_dim 80)
  std::string backend = "cpu";    // "cpu" or "cuda"
  // cpu: target levels ("avx512", "avx2", ...; empty: this host's); each op gets the target it
  // would run on such a CPU. cuda: device archs ("sm_90a", "sm_80", ...; required); each op
  // gets the target and cubin arch it would run with on such a device.
  std::vector<std::string> archs;
  int jobs = 0;  // parallel compiles; 0 or more than the bound: the bound from free memory and cores
  std::function<void(const BundleBuildProgress&)> progress;  // called from worker threads, one at a time
};

struct BundleBuildReport {
  size_t entries = 0;
  uint64_t size = 0, stored_size = 0;  // binaries decompressed; the file
  double seconds = 0;
  int jobs = 0;
};

// Compiles the selected variants (through the disk cache, as `ejk compile` does) and writes
// them as one bundle, atomically. InvalidArgument for a bad request (naming the field), and
// what a compile throws (naming the key); no file is written then.
EJK_API BundleBuildReport build_bundle(const BundleBuildRequest& request);

}  // namespace ejk
