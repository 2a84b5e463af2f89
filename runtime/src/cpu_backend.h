// CPU variants: find one (AOT table → this process → disk cache → ORC JIT) and run it on the
// thread pool.
#pragma once
#include <string>

#include "ejk/core/registry_data.h"
#include "ejk/core/schema.h"
#include "ejk/flash_attention.h"

namespace ejk::detail {

struct CpuVariant {
  generated::CpuTaskFn fn = nullptr;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0, load_ms = 0;
  std::string cache_path;  // the disk cache entry (JIT-built variants)
};

// The spec target this host runs best: the first of the backend's targets whose required CPU
// features the host has (the spec lists them fastest first).
std::string host_cpu_target(const OpSchema& schema);

// Thread-safe; a variant is compiled at most once per process (and once per machine, through
// the disk cache's lock).
CpuVariant acquire_cpu_variant(const OpSchema& schema, const VariantKey& key);

// Runs tasks [0, num_tasks) of a CPU kernel over the global thread pool.
void run_cpu_tasks(generated::CpuTaskFn fn, const void* params, long long num_tasks);

}  // namespace ejk::detail
