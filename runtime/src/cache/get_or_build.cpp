#include "cache/get_or_build.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk::cache {
namespace {

void warn(const std::string& message) {
  std::fprintf(stderr, "ejk: warning: %s\n", message.c_str());
}

std::optional<EntryLock> lock_or_warn(DiskCache& cache, const std::string& backend,
                                      const std::string& key, const std::string& hash_hex) {
  try {
    return cache.lock(backend, key, hash_hex);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    warn(fmt::format("building {} without the cache lock: {}", key, e.what()));
    return std::nullopt;
  }
}

void store_or_warn(DiskCache& cache, const std::string& backend, const std::string& key,
                   const std::string& hash_hex, const std::vector<uint8_t>& bytes) {
  try {
    cache.store(backend, key, hash_hex, bytes);
  } catch (const InvalidArgument&) {
    throw;
  } catch (const Error& e) {
    warn(fmt::format("{} was built but not cached: {}", key, e.what()));
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

}  // namespace

std::string_view to_string(Source source) { return source == Source::Cache ? "cache" : "jit"; }

bool jit_disabled() {
  const char* v = std::getenv("EJK_DISABLE_JIT");
  return v != nullptr && std::string_view(v) == "1";
}

BuildResult get_or_build(DiskCache& cache, const std::string& backend, const std::string& key,
                         const std::string& hash_hex, const Builder& builder) {
  if (auto hit = cache.load(backend, key, hash_hex)) return {std::move(*hit), Source::Cache, 0.0};
  if (jit_disabled())
    throw CompileError(fmt::format(
        "variant {} is not built in and not cached (hash {}), and EJK_DISABLE_JIT=1 forbids "
        "compiling it",
        key, hash_hex));

  std::optional<EntryLock> lock = lock_or_warn(cache, backend, key, hash_hex);
  // Another process may have built it while we waited for the lock.
  if (auto hit = cache.load(backend, key, hash_hex)) return {std::move(*hit), Source::Cache, 0.0};
  BuildResult result = run_builder(key, builder);
  store_or_warn(cache, backend, key, hash_hex, result.bytes);
  return result;  // the lock is released after the store, so waiters find the entry
}

}  // namespace ejk::cache
