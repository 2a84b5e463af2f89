// The shared public types: backends, variant sources, the compile observer.
#include "ejk/types.h"

#include <fmt/format.h>

#include <mutex>

#include "device_memory.h"
#include "ejk/core/error.h"
#include "observer.h"

namespace ejk {
namespace {
std::mutex g_mu;
CompileObserver g_observer;
}  // namespace

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::auto_: return "auto";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
    case Backend::hip: return "hip";
  }
  return "?";
}

Backend parse_backend(std::string_view s) {
  if (s == "auto") return Backend::auto_;
  if (s == "cpu") return Backend::cpu;
  if (s == "cuda") return Backend::cuda;
  if (s == "hip") return Backend::hip;
  throw InvalidArgument(fmt::format("backend: unknown '{}', expected auto, cpu, cuda or hip", s));
}

bool backend_available(Backend b, std::string* why) {
  switch (b) {
    case Backend::auto_:
    case Backend::cpu: return true;
    case Backend::cuda: return detail::cuda_usable(why);
    case Backend::hip:
      if (why) *why = "this build has no HIP backend";
      return false;
  }
  return false;
}

std::string_view source_name(VariantSource s) {
  switch (s) {
    case VariantSource::aot: return "aot";
    case VariantSource::bundle: return "bundle";
    case VariantSource::cache: return "cache";
    case VariantSource::jit: return "jit";
  }
  return "?";
}

void set_compile_observer(CompileObserver observer) {
  std::lock_guard lk(g_mu);
  g_observer = std::move(observer);
}

namespace detail {
void notify_compile(std::string_view key, bool started) {
  CompileObserver obs;
  {
    std::lock_guard lk(g_mu);
    obs = g_observer;
  }
  if (obs) obs(key, started);
}
}  // namespace detail
}  // namespace ejk
