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

TensorView to_view(const ejk_tensor& t, const char* name) {
  if (t.rank < 0 || t.rank > Dims::kMaxRank || (t.rank > 0 && !t.shape))
    throw InvalidArgument(fmt::format("{}: rank must be 0..{} with a shape array, got {}", name, int(Dims::kMaxRank), t.rank));
  if (t.dtype < EJK_F32 || t.dtype > EJK_U8) throw InvalidArgument(fmt::format("{}: unknown dtype code {}", name, t.dtype));
  if (t.device_kind < EJK_DEVICE_CPU || t.device_kind > EJK_DEVICE_HIP)
    throw InvalidArgument(fmt::format("{}: unknown device kind {}", name, t.device_kind));
  if (t.device_index < 0) throw InvalidArgument(fmt::format("{}: device index must be >= 0, got {}", name, t.device_index));
  for (int32_t i = 0; i < t.rank; ++i)
    if (t.shape[i] < 0) throw InvalidArgument(fmt::format("{}: dim {} is {}; dims must be >= 0", name, i, t.shape[i]));
  TensorView v;
  v.data = t.data;
  v.dtype = static_cast<DType>(t.dtype);
  v.device = {static_cast<DeviceKind>(t.device_kind), t.device_index};
  v.shape = Dims(t.shape, t.rank);
  v.strides = t.strides ? Dims(t.strides, t.rank) : contiguous_strides(v.shape);
  return v;
}

void read_versioned(const void* in, void* out, size_t ours, const char* name, std::initializer_list<size_t> older) {
  uint32_t size = 0;
  std::memcpy(&size, in, sizeof(size));
  const bool known = size == ours || std::find(older.begin(), older.end(), size_t(size)) != older.end();
  if (!known)
    throw InvalidArgument(fmt::format("{}: struct_size {} is not the size of a version this library (ABI {}) knows "
                                      "({} bytes); call its _init function first, or upgrade libejk",
                                      name, size, EJK_ABI_VERSION, ours));
  std::memcpy(out, in, std::min<size_t>(size, ours));
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

namespace ejk::capi {

Args to_args(const ejk_arg* args, int32_t num_args, const char* caller) {
  if (num_args < 0 || (num_args > 0 && args == nullptr))
    throw InvalidArgument(fmt::format("{}: {} arguments but no array", caller, num_args));
  Args a;
  for (int32_t i = 0; i < num_args; ++i) {
    const ejk_arg& x = args[i];
    if (x.name == nullptr) throw InvalidArgument(fmt::format("{}: argument {} has no name", caller, i));
    // Set twice, the later would silently win; a caller's mistake either way.
    const bool tuning = x.kind == EJK_ARG_TUNE;
    const bool seen = tuning ? std::any_of(a.tuning().begin(), a.tuning().end(), [&](const auto& e) { return e.first == x.name; })
                             : a.tensor(x.name) != nullptr || a.scalar(x.name) != nullptr;
    if (seen) throw InvalidArgument(fmt::format("{}: argument '{}' is given twice", caller, x.name));
    switch (x.kind) {
      case EJK_ARG_TENSOR:
        if (x.tensor == nullptr) throw InvalidArgument(fmt::format("{}: tensor argument without a tensor", x.name));
        a.set(x.name, capi::to_view(*x.tensor, x.name));
        break;
      case EJK_ARG_BOOL: a.set(x.name, Scalar(x.ints[0] != 0)); break;
      case EJK_ARG_INT: a.set(x.name, Scalar(x.ints[0])); break;
      case EJK_ARG_FLOAT: a.set(x.name, Scalar(x.real)); break;
      case EJK_ARG_INT_PAIR: a.set(x.name, Scalar(std::array<int64_t, 2>{x.ints[0], x.ints[1]})); break;
      case EJK_ARG_TUNE: a.tune(x.name, x.ints[0]); break;
      default: throw InvalidArgument(fmt::format("{}: unknown argument kind {}", x.name, x.kind));
    }
  }
  return a;
}

// An output whose stride is 0 in a dim of size > 1 writes every index of that dim to the same
// memory: the result is whichever write lands last. A C caller builds strides by hand, so
// this is where such a descriptor is refused.
}  // namespace ejk::capi

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

extern "C" const char* ejk_last_error(void) { return capi::last_error(); }
