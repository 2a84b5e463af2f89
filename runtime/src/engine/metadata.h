// Checks of host-resident metadata that several ops share. Device-resident metadata is never read
// by the host (no device-to-host copy on the hot path): only the kernels see it.
#pragma once
#include <cstdint>
#include <string_view>

#include "ejk/tensor.h"

namespace ejk::engine {

// Offsets of packed sequences (cu_seqlens: N + 1 i32 entries on the CPU): they start at 0, never
// decrease and end at `total` (the packed length). Returns the longest sequence.
// InvalidArgument "<op>: <arg>: ..." naming the first entry that breaks a rule.
int64_t check_offsets(std::string_view op, std::string_view arg, const TensorView& offsets, int64_t total);

}  // namespace ejk::engine
