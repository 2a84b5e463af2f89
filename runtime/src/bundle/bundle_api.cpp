// The public bundle API (ejk/bundle.h) besides building: registering, inspecting and extracting
// bundles, and ejk_load_bundle of the C ABI.
#include <memory>
#include <system_error>

#include <fmt/format.h>

#include "api/c_support.h"
#include "bundle/reader.h"
#include "bundle/bundle_set.h"
#include "cache/payload_check.h"
#include "cache/posix_io.h"
#include "ejk/bundle.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "engine/variant_store.h"
#include "registry.h"

namespace ejk {
namespace {
namespace fs = std::filesystem;

// Inspection reads files it will never load, so it does not ask who may write them.
bundle::Reader open_for_inspection(const fs::path& file) {
  return bundle::Reader(bundle::FileSource::open(file, /*require_trust=*/false), file.string());
}

BundleEntryInfo entry_info(const bundle::Slot& s) {
  BundleEntryInfo e;
  if (!s.record) {
    e.valid = false;
    e.problem = s.problem;
    return e;
  }
  const bundle::EntryMeta& m = s.record->meta;
  e.backend = m.backend;
  e.key = m.key;
  e.target = m.target;
  e.arch = m.arch;
  e.compiler = m.compiler;
  e.content_hash = m.content_hash;
  e.size = s.record->size;
  e.stored_size = s.record->stored_size;
  return e;
}

BundleInfo bundle_info(const bundle::Reader& r, const fs::path& file) {
  BundleInfo info;
  info.path = file;
  info.format_version = r.header().format_version;
  info.generator_version = r.header().generator_version;
  info.file_size = r.header().file_size;
  info.problems = r.problems();
  for (const bundle::Slot& s : r.slots()) info.entries.push_back(entry_info(s));
  return info;
}

// Entry i as the runtime would take it: read, verified, decompressed and payload-checked.
bundle::Payload checked_payload(const bundle::Reader& r, size_t i) {
  bundle::Payload p = r.read(i);
  if (!p.problem.empty()) return p;
  const bundle::EntryMeta& m = r.slots()[i].record->meta;
  if (auto why = cache::check_payload(m.backend, cache::symbol_for_key(m.key), p.bytes)) {
    p.problem = "payload: " + *why;
    p.bytes.clear();
  }
  return p;
}

// Whether the entry's content hash is the one this library computes for its key; nullopt where
// it cannot tell (an op this build lacks, a CPU key without the CPU JIT).
std::optional<bool> is_current(const bundle::EntryMeta& m) {
  try {
    const OpSchema& s = detail::op_schema(m.key.substr(0, m.key.find('.')));
    const auto want = engine::bundle_hash_here(s, s.parse_key(m.key), m);
    if (!want) return std::nullopt;
    return *want == m.content_hash;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string file_name(const BundleEntryInfo& e) {
  return e.backend == "cpu" ? e.key + ".o" : fmt::format("{}.{}.cubin", e.key, e.arch);
}

}  // namespace

size_t load_bundle(const fs::path& path) { return bundle::add(path); }

BundleInfo inspect_bundle(const fs::path& file, bool verify) {
  const bundle::Reader r = open_for_inspection(file);
  BundleInfo info = bundle_info(r, file);
  if (!verify) return info;
  for (size_t i = 0; i < info.entries.size(); ++i) {
    BundleEntryInfo& e = info.entries[i];
    if (!e.valid) continue;
    if (bundle::Payload p = checked_payload(r, i); !p.problem.empty()) {
      e.valid = false;
      e.problem = p.problem;
      continue;
    }
    e.current = is_current(r.slots()[i].record->meta);
  }
  return info;
}

BundleInfo extract_bundle(const fs::path& file, const fs::path& dir) {
  const bundle::Reader r = open_for_inspection(file);
  BundleInfo info = bundle_info(r, file);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InvalidArgument(fmt::format("bundle extract: --out '{}': {}", dir.string(), ec.message()));
  for (size_t i = 0; i < info.entries.size(); ++i) {
    BundleEntryInfo& e = info.entries[i];
    if (!e.valid) continue;
    bundle::Payload p = checked_payload(r, i);
    if (!p.problem.empty()) {
      e.valid = false;
      e.problem = p.problem;
      continue;
    }
    // Names were checked when the record was read: [A-Za-z0-9._-] only, never a path.
    e.extracted = dir / file_name(e);
    cache::io::write_file_atomic(e.extracted, p.bytes);
  }
  return info;
}

}  // namespace ejk

extern "C" int ejk_load_bundle(const char* path) {
  return ejk::capi::guarded([&] {
    if (path == nullptr) throw ejk::InvalidArgument("ejk_load_bundle: path is NULL");
    ejk::load_bundle(path);
  });
}
