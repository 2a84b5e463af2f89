// The one protocol for turning a variant into bytes through the disk cache:
//
//   lookup -> (miss) take the entry's lock -> lookup again -> build -> store -> release
//
// The second lookup is what makes N processes asking for the same missing variant build it
// once: all but the first find it in the cache after waiting on the lock.
//
// The cache only ever costs sharing, never the run: an unusable cache (untrusted owner or mode,
// EACCES, ENOTDIR, ENAMETOOLONG, ...), an entry that cannot be read (a FIFO or directory at its
// path), a lock held past lock_timeout() (a stopped compiler) or a failed store each print one
// warning line to stderr and the variant is compiled in memory.
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

// EJK_DISABLE_JIT as a strict boolean (1/0/true/false/yes/no/on/off); InvalidArgument otherwise.
bool jit_disabled();

// Returns the cached bytes or builds, stores and returns them. `hash_hex` comes from the
// caller (util::hash_strings_hex over everything that determines the binary). A hit whose
// payload `check` refuses (e.g. check_payload with the kernel symbol) is removed and rebuilt,
// so bytes returned from the cache have passed it.
//
// Throws CompileError when the entry is missing and EJK_DISABLE_JIT is on (checked before any
// lock, so it also works on a read-only cache), and whatever the builder throws.
BuildResult get_or_build(DiskCache& cache, const std::string& backend, const std::string& key,
                         const std::string& hash_hex, const Builder& builder,
                         const PayloadCheck& check = {});

}  // namespace ejk::cache
