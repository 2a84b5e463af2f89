#include "cache/get_or_build.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "util/env.h"

namespace ejk::cache {
namespace {

void warn(const std::string& message) {
  std::fprintf(stderr, "ejk: warning: %s\n", message.c_str());
}

// Conditions that would repeat for every variant (an unusable root, a read-only cache, a
// stopped lock holder) are reported once per process.
void warn_once(const std::string& topic, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard lk(mu);
    if (!seen.insert(topic).second) return;
  }
  warn(message);
}

// What a lookup came to: a hit, a miss, or a read failure the caller falls back from.
struct Attempt {
  std::optional<std::vector<uint8_t>> hit;
  std::optional<std::string> failure;
};

Attempt try_lookup(DiskCache& cache, const std::string& backend, const std::string& key,
                   const std::string& hash_hex, const PayloadCheck& check) {
  try {
    Lookup found = cache.lookup(backend, key, hash_hex, check);
    if (!found.removed.empty())
      warn(fmt::format("removed a bad cache entry for {}: {}", key, found.removed));
    return {std::move(found.payload), std::nullopt};
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    return {std::nullopt, std::string(e.what())};
  }
}

BuildResult run_builder(const std::string& key, const Builder& builder) {
  auto start = std::chrono::steady_clock::now();
  BuildResult result;
  result.bytes = builder();
  result.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.source = Source::Jit;
  if (result.bytes.empty())
    throw CompileError(fmt::format("building variant {} produced no bytes", key));
  return result;
}

void require_jit(const std::string& key, const std::string& hash_hex, std::string_view why) {
  if (jit_disabled())
    throw CompileError(fmt::format(
        "variant {} is not built in and not cached (hash {}{}), and EJK_DISABLE_JIT=1 forbids "
        "compiling it", key, hash_hex, why));
}

// nullopt when the lock could not be taken: timed out (a holder that does not finish) or failed.
std::optional<EntryLock> lock_or_warn(DiskCache& cache, const std::string& backend,
                                      const std::string& key, const std::string& hash_hex) {
  const std::chrono::milliseconds timeout = lock_timeout();
  try {
    if (auto held = cache.lock_for(backend, key, hash_hex, timeout)) return held;
    warn_once("lock-timeout", fmt::format(
        "waited {} s for another process to finish compiling {} (EJK_CACHE_LOCK_TIMEOUT_S); "
        "compiling it here instead", timeout.count() / 1000, key));
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    warn(fmt::format("building {} without the cache lock: {}", key, e.what()));
  }
  return std::nullopt;
}

void store_or_warn(DiskCache& cache, const std::string& backend, const std::string& key,
                   const std::string& hash_hex, const std::vector<uint8_t>& bytes) {
  try {
    std::string note = cache.store(backend, key, hash_hex, bytes);
    if (!note.empty()) warn(fmt::format("{} was cached, but not yet durably: {}", key, note));
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    warn(fmt::format("{} was built but not cached: {}", key, e.what()));
  }
}

BuildResult build_in_memory(const std::string& key, const std::string& hash_hex,
                            const Builder& builder, std::string_view why) {
  require_jit(key, hash_hex, why);
  return run_builder(key, builder);
}

}  // namespace

std::string_view to_string(Source source) { return source == Source::Cache ? "cache" : "jit"; }

bool jit_disabled() { return util::env_bool("EJK_DISABLE_JIT", false); }

BuildResult get_or_build(DiskCache& cache, const std::string& backend, const std::string& key,
                         const std::string& hash_hex, const Builder& builder,
                         const PayloadCheck& check) {
  cache.entry_path(backend, key, hash_hex);  // argument errors are the caller's, not a fallback
  if (auto why = cache.unusable(backend)) {
    warn_once("unusable:" + cache.root().string(),
              fmt::format("not using the cache: {}; compiling in memory", *why));
    return build_in_memory(key, hash_hex, builder, "; the cache is unusable");
  }
  Attempt first = try_lookup(cache, backend, key, hash_hex, check);
  if (first.hit) return {std::move(*first.hit), Source::Cache, 0.0};
  if (first.failure) {
    warn(fmt::format("cannot read the cache entry for {} ({}); compiling in memory", key,
                     *first.failure));
    return build_in_memory(key, hash_hex, builder, "; its cache entry is unreadable");
  }
  require_jit(key, hash_hex, "");
  if (cache.read_only()) {
    warn_once("read-only:" + cache.root().string(),
              fmt::format("the cache {} is read-only for this user: compiled variants are not "
                          "stored", cache.root().string()));
    return run_builder(key, builder);
  }
  std::optional<EntryLock> lock = lock_or_warn(cache, backend, key, hash_hex);
  // Another process may have built it while we waited for the lock.
  if (lock) {
    Attempt second = try_lookup(cache, backend, key, hash_hex, check);
    if (second.hit) return {std::move(*second.hit), Source::Cache, 0.0};
  }
  BuildResult result = run_builder(key, builder);
  store_or_warn(cache, backend, key, hash_hex, result.bytes);
  return result;  // the lock is released after the store, so waiters find the entry
}

}  // namespace ejk::cache
