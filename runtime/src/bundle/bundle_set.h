// The bundles this process uses, in the order they were registered (EJK_BUNDLE_PATH's first,
// then each ejk::load_bundle), and the lookup the variant store makes in them between its
// built-in tables and the disk cache.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bundle/format.h"
#include "cache/disk_cache.h"

namespace ejk::bundle {

// Reads EJK_BUNDLE_PATH (bundle files or directories of *.ejkb, separated by ':') once per
// process and registers its bundles; until that succeeds, every call reads it again. An empty
// element or a path that is not there is an InvalidArgument naming the variable and the
// element; a bundle that cannot be used as a whole (a damaged header, a newer format, a file
// others may write) is skipped with one warning line.
void use_environment();

// Registers `path` (a bundle file, or a directory: its *.ejkb files by name) after those
// registered before; a file registered already is not added again. Returns the usable entries
// it added. InvalidArgument naming the file when one cannot be used as a whole.
size_t add(const std::filesystem::path& path);

struct Hit {
  std::vector<uint8_t> bytes;  // verified, decompressed, accepted by the payload check
  std::string bundle;          // the file it came from
  size_t bundle_index = 0, entry = 0;
};

// The content hash an entry must carry to be used for the key being looked up.
using ExpectedHash = std::function<std::string(const EntryMeta&)>;

// The binary of (backend, key, arch; arch is not compared for "cpu", whose key names its
// target) from the first registered bundle whose entry is current (its content hash is
// `expected`'s) and intact (both checksums, decompression, `check`); nullopt when none. A stale
// entry is skipped with a one-line note, a damaged one with a one-line warning; neither is
// tried again.
std::optional<Hit> find(std::string_view backend, std::string_view key, std::string_view arch,
                        const ExpectedHash& expected, const cache::PayloadCheck& check);

// Marks an entry find() returned as unusable (the loader refused it), with a warning line.
void reject(const Hit& hit, const std::string& why);

// The files EJK_BUNDLE_PATH names, in order (directories expanded); InvalidArgument as above.
std::vector<std::filesystem::path> parse_bundle_path(const std::string& value);

}  // namespace ejk::bundle
