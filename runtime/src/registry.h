// What the generated registry holds, looked up by name: op schemas parsed from the embedded
// specs, templates and kernel headers for the JIT, and the AOT tables.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ejk/core/registry_data.h"
#include "ejk/core/schema.h"

namespace ejk::detail {

// The schema of an op ("flash_fwd"), parsed once from the spec embedded at build time.
const OpSchema& op_schema(std::string_view op);
std::vector<const OpSchema*> all_op_schemas();

// Template text by file name (e.g. "flash_fwd.cpu.cpp.tmpl"); InvalidArgument if absent.
std::string_view template_text(std::string_view name);

// Every kernel header as (include path, text), for the JIT's in-memory file system.
const std::vector<std::pair<std::string, std::string>>& kernel_headers();

// Rendered source of a variant: the same text the AOT build compiled for that key.
std::string render_source(const OpSchema& schema, const VariantKey& key);

// The built-in variant of a key, or nullptr.
const generated::CpuAotEntry* find_cpu_aot(std::string_view key);
const generated::CudaAotEntry* find_cuda_aot(std::string_view key);

}  // namespace ejk::detail
