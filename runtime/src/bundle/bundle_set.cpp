#include "bundle/bundle_set.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "bundle/reader.h"
#include "cache/posix_io.h"
#include "cache/trust.h"
#include "ejk/core/error.h"
#include "util/env.h"

namespace ejk::bundle {
namespace fs = std::filesystem;
namespace {

using EntryId = std::tuple<std::string, std::string, std::string>;

EntryId entry_id(std::string_view backend, std::string_view key, std::string_view arch) {
  return {std::string(backend), std::string(key), backend == "cpu" ? std::string() : std::string(arch)};
}

struct Opened {
  fs::path path;
  std::unique_ptr<Reader> reader;
  std::map<EntryId, size_t> index;  // usable records by identity
  std::vector<bool> rejected;       // per entry: stale, damaged or refused by the loader
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Opened>> bundles;
  bool environment_read = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

void warn(const std::string& message) { std::fprintf(stderr, "ejk: warning: %s\n", message.c_str()); }

// The *.ejkb files of a directory, by name.
std::vector<fs::path> bundles_in(const fs::path& dir, std::string_view what) {
  std::string error;
  auto names = cache::io::list_directory(dir, error);
  if (!names) throw InvalidArgument(fmt::format("{}: cannot list '{}': {}", what, dir.string(), error));
  std::vector<fs::path> out;
  for (const std::string& n : *names)
    if (n.size() > 5 && n.ends_with(".ejkb")) out.push_back(dir / n);
  return out;
}

// A bundle file, or a directory's bundles; `what` names the source in messages.
std::vector<fs::path> expand(const fs::path& path, std::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw InvalidArgument(fmt::format("{}: '{}': {} (expected a bundle file or a directory of *.ejkb)", what,
                                      path.string(), std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) return bundles_in(path, what);
  if (S_ISREG(st.st_mode)) return {path};
  throw InvalidArgument(fmt::format("{}: '{}' is a {}, not a bundle file or a directory", what, path.string(),
                                    cache::trust::file_kind(st.st_mode)));
}

// Opens and indexes one bundle (the caller holds the registry's lock); InvalidArgument when it
// cannot be used as a whole. Damage confined to entries is reported here, one line each.
size_t add_file(Registry& r, const fs::path& file) {
  std::error_code ec;
  fs::path canonical = fs::canonical(file, ec);
  if (ec) canonical = file;
  for (const auto& o : r.bundles)
    if (o->path == canonical) return 0;
  auto o = std::make_unique<Opened>();
  o->path = canonical;
  o->reader = std::make_unique<Reader>(FileSource::open(canonical), canonical.string());
  for (const std::string& p : o->reader->problems()) warn(fmt::format("bundle '{}': {}", canonical.string(), p));
  const auto& slots = o->reader->slots();
  o->rejected.assign(slots.size(), false);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].record) {
      warn(fmt::format("bundle '{}': entry {}: {}; not used", canonical.string(), i, slots[i].problem));
      continue;
    }
    const EntryMeta& m = slots[i].record->meta;
    o->index.emplace(entry_id(m.backend, m.key, m.arch), i);
  }
  const size_t usable = o->index.size();
  r.bundles.push_back(std::move(o));
  return usable;
}

// The entry's content hash against the one computed here; a one-line note when they differ.
bool current(const Opened& o, const Record& rec, const ExpectedHash& expected) {
  const std::string want = expected(rec.meta);
  if (rec.meta.content_hash == want) return true;
  std::fprintf(stderr,
               "ejk: note: bundle '%s': %s (%s) is stale here (content hash %s, this library's %s: built from "
               "other sources, generator or compiler); not used\n",
               o.path.c_str(), rec.meta.key.c_str(), rec.meta.arch.c_str(), rec.meta.content_hash.c_str(),
               want.c_str());
  return false;
}

}  // namespace

std::vector<fs::path> parse_bundle_path(const std::string& value) {
  const std::string what = fmt::format("EJK_BUNDLE_PATH=\"{}\"", value);
  std::vector<fs::path> files;
  size_t start = 0, element = 1;
  while (true) {
    const size_t end = std::min(value.find(':', start), value.size());
    const std::string part = value.substr(start, end - start);
    if (part.empty())
      throw InvalidArgument(fmt::format("{}: element {} is empty (expected bundle files or directories of "
                                        "*.ejkb separated by ':')", what, element));
    std::error_code ec;
    const fs::path path = fs::absolute(part, ec);
    if (ec)
      throw InvalidArgument(fmt::format("{}: '{}': a relative path, and the working directory cannot be read ({})",
                                        what, part, ec.message()));
    for (fs::path& f : expand(path.lexically_normal(), what)) files.push_back(std::move(f));
    if (end == value.size()) break;
    start = end + 1;
    ++element;
  }
  return files;
}

void use_environment() {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  if (r.environment_read) return;
  std::vector<fs::path> files;
  if (auto value = util::env_string("EJK_BUNDLE_PATH")) files = parse_bundle_path(*value);
  for (const fs::path& f : files) {
    try {
      add_file(r, f);
    } catch (const InvalidArgument& e) {
      warn(fmt::format("{}; not used", e.what()));
    }
  }
  r.environment_read = true;
}

size_t add(const fs::path& path) {
  use_environment();  // EJK_BUNDLE_PATH's bundles come first
  const std::vector<fs::path> files = expand(path, "load_bundle");
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  size_t added = 0;
  for (const fs::path& f : files) added += add_file(r, f);
  return added;
}

std::optional<Hit> find(std::string_view backend, std::string_view key, std::string_view arch,
                        const ExpectedHash& expected, const cache::PayloadCheck& check) {
  use_environment();
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  const EntryId id = entry_id(backend, key, arch);
  for (size_t b = 0; b < r.bundles.size(); ++b) {
    Opened& o = *r.bundles[b];
    const auto it = o.index.find(id);
    if (it == o.index.end() || o.rejected[it->second]) continue;
    const size_t i = it->second;
    const Record& rec = *o.reader->slots()[i].record;
    if (!current(o, rec, expected)) {
      o.rejected[i] = true;
      continue;
    }
    Payload p = o.reader->read(i);
    if (p.problem.empty() && check)
      if (auto why = check(p.bytes)) p.problem = "payload: " + *why;
    if (!p.problem.empty()) {
      warn(fmt::format("bundle '{}': entry {}: {}; not used", o.path.string(), rec.meta.key, p.problem));
      o.rejected[i] = true;
      continue;
    }
    return Hit{std::move(p.bytes), o.path.string(), b, i};
  }
  return std::nullopt;
}

void reject(const Hit& hit, const std::string& why) {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  if (hit.bundle_index >= r.bundles.size()) return;
  Opened& o = *r.bundles[hit.bundle_index];
  if (hit.entry >= o.rejected.size()) return;
  o.rejected[hit.entry] = true;
  warn(fmt::format("bundle '{}': entry {} could not be loaded: {}; not used", o.path.string(),
                   o.reader->slots()[hit.entry].record->meta.key, why));
}

}  // namespace ejk::bundle
