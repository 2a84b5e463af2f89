// The C ABI's core: versions, contexts, tensors, errors, and ejk_run (any op by name).
#include "ejk/ejk.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "api/c_support.h"
#include "ejk/core/error.h"
#include "ejk/op.h"
#include "engine/op_def.h"
#include "engine/tuning_store.h"

namespace ejk::capi {
namespace {
thread_local std::string g_last_error;
}  // namespace

void set_last_error(std::string message) { g_last_error = std::move(message); }
const char* last_error() { return g_last_error.c_str(); }

int status_of_current_exception() {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    g_last_error = e.what();
    return EJK_INVALID_ARGUMENT;
  } catch (const SpecError& e) {
    g_last_error = e.what();
    return EJK_INVALID_ARGUMENT;
  } catch (const CompileError& e) {
    g_last_error = e.what();
    return EJK_COMPILE_ERROR;
  } catch (const BackendUnavailable& e) {
    g_last_error = e.what();
    return EJK_BACKEND_UNAVAILABLE;
  } catch (const std::exception& e) {
    g_last_error = std::string("internal error: ") + e.what();
    return EJK_INTERNAL_ERROR;
  } catch (...) {
    g_last_error = "internal error: unknown exception";
    return EJK_INTERNAL_ERROR;
  }
}

Context to_context(const ejk_context* ctx, CpuExecutor& executor) {
  Context c;
  if (ctx == nullptr) return c;
  ejk_context x;
  ejk_context_init(&x);
  read_versioned(ctx, &x, sizeof(x), "ejk_context");
  if (x.backend < EJK_BACKEND_AUTO || x.backend > EJK_BACKEND_HIP)
    throw InvalidArgument(fmt::format("ejk_context: unknown backend code {}", x.backend));
  c.backend = static_cast<Backend>(x.backend);
  c.stream = x.stream;
  if (x.cpu_parallel_for != nullptr) {
    executor.parallel_for = x.cpu_parallel_for;
    executor.self = x.cpu_pool;
    c.cpu_executor = &executor;
  }
  return c;
}

}  // namespace ejk::capi

using namespace ejk;

extern "C" uint32_t ejk_version(void) {
  return uint32_t{EJK_VERSION_MAJOR} << 16 | uint32_t{EJK_VERSION_MINOR} << 8 | uint32_t{EJK_VERSION_PATCH};
}
extern "C" uint32_t ejk_abi_version(void) { return EJK_ABI_VERSION; }

extern "C" void ejk_context_init(ejk_context* ctx) {
  *ctx = ejk_context{};
  ctx->struct_size = sizeof(ejk_context);
}

extern "C" int ejk_run(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx) {
  return capi::guarded([&] {
    if (op == nullptr) throw InvalidArgument("ejk_run: op is NULL");
    const Args a = capi::to_args(args, num_args, "ejk_run");
    CpuExecutor executor;
    ejk::run(op, a, capi::to_context(ctx, executor));
  });
}

extern "C" int ejk_variant_key(const char* op, const ejk_arg* args, int32_t num_args, const ejk_context* ctx,
                               char* key, int64_t key_size) {
  return capi::guarded([&] {
    if (op == nullptr) throw InvalidArgument("ejk_variant_key: op is NULL");
    if (key == nullptr || key_size <= 0) throw InvalidArgument("ejk_variant_key: key: expected a buffer");
    const Args a = capi::to_args(args, num_args, "ejk_variant_key");
    CpuExecutor executor;
    const std::string k = ejk::variant_key(op, a, capi::to_context(ctx, executor));
    if (static_cast<int64_t>(k.size()) >= key_size)
      throw InvalidArgument(fmt::format("ejk_variant_key: key_size: {} bytes, the key needs {}", key_size, k.size() + 1));
    std::memcpy(key, k.c_str(), k.size() + 1);
  });
}

extern "C" void ejk_set_compile_observer(ejk_compile_observer observer, void* user) {
  if (observer == nullptr) return set_compile_observer({});
  set_compile_observer([observer, user](std::string_view key, bool started) {
    const std::string k(key);  // NUL-terminated for C
    observer(user, k.c_str(), started ? 1 : 0);
  });
}

extern "C" int ejk_set_autotune(const char* ops) {
  return capi::guarded([&] {
    engine::tuning::set_autotune(ops == nullptr ? std::nullopt : std::optional<std::string>(ops));
  });
}

extern "C" const char* ejk_last_error(void) { return capi::last_error(); }
