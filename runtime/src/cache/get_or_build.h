// The one protocol for turning a variant into bytes through the disk cache:
//
//   lookup -> (miss) take the entry's lock -> lookup again -> build -> store -> release
//
// The second lookup is what makes N processes asking for the same missing variant build it
// once: all but the first find it in the cache after waiting on the lock.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/disk_cache.h"

namespace ejk::cache {

enum class Source { Cache, Jit };

std::string_view to_string(Source source);  // "cache" | "jit"

struct BuildResult {
  std::vector<uint8_t> bytes;
  Source source = Source::Cache;
  double build_ms = 0.0;  // time inside the builder; 0 for a cache hit
};

using Builder = std::function<std::vector<uint8_t>()>;

// True when EJK_DISABLE_JIT is set to "1".
bool jit_disabled();

// Returns the cached bytes or builds, stores and returns them. `hash_hex` comes from the
// caller (util::hash_strings_hex over everything that determines the binary).
//
// Throws CompileError when the entry is missing and EJK_DISABLE_JIT=1 (checked before any
// lock, so it also works on a read-only cache), and whatever the builder throws.
// Failing to lock or store only costs sharing: the bytes are still returned and one warning
// line goes to stderr.
BuildResult get_or_build(DiskCache& cache, const std::string& backend, const std::string& key,
                         const std::string& hash_hex, const Builder& builder);

}  // namespace ejk::cache
