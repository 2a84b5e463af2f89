// What every op shares: where a call runs (Context), what it reports (RunInfo), and the
// backends.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "ejk/export.h"

namespace ejk {

enum class Backend : uint8_t { auto_, cpu, cuda, hip };
EJK_API std::string_view backend_name(Backend b);
EJK_API Backend parse_backend(std::string_view s);  // InvalidArgument naming the accepted values
// Whether a backend can run here; `why` says why not (no driver, no device, not built).
EJK_API bool backend_available(Backend b, std::string* why = nullptr);

// Runs CPU tasks on a caller's thread pool (XLA hands its FFI handlers one) instead of ours:
// parallel_for must call fn(arg, begin, end) over disjoint ranges covering [0, n) and return
// when all have run.
struct CpuExecutor {
  void (*parallel_for)(void* self, int64_t n, void (*fn)(void* arg, int64_t begin, int64_t end),
                       void* arg) = nullptr;
  void* self = nullptr;
};

// Where a call runs. Nothing in it is owned; it is cheap to copy.
struct Context {
  // auto: the backend of the device the tensors are on. Naming one checks that they are there.
  Backend backend = Backend::auto_;
  // CUDA: the CUstream to launch on (null: the legacy default stream). Calls are asynchronous
  // on it: no host synchronisation and no device-to-host copy, so they can be captured in a
  // CUDA graph once their variant is loaded. Ignored on the CPU.
  void* stream = nullptr;
  // CPU: the pool that runs the tasks (null: ours, EJK_NUM_THREADS threads).
  const CpuExecutor* cpu_executor = nullptr;
};

// Where the variant came from, for logs, the CLI's --json and tests.
enum class VariantSource : uint8_t { aot, bundle, cache, jit };
EJK_API std::string_view source_name(VariantSource s);

struct RunInfo {
  std::string key;           // canonical variant key
  Backend backend = Backend::cpu;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0;     // JIT compile (0 unless source == jit)
  double load_ms = 0;        // cache load or module load
  bool tuned = false;        // the key came from the tuning store (ejk tune), not the heuristic
};

// Called with (key, true) before a variant is compiled and (key, false) after, from the
// compiling thread; the CLI shows progress with it. Pass an empty function to remove.
using CompileObserver = std::function<void(std::string_view key, bool started)>;
EJK_API void set_compile_observer(CompileObserver observer);

}  // namespace ejk
