// The typed APIs of every public op, rendered from its spec: the C++ header ejk/ops/<op>.h
// (inputs, options and result structs, the allocating, _into and _reference forms), the C
// header ejk/ops/<op>_c.h (a struct_size-versioned options struct with a has_ flag for every
// optional scalar, the function taking tensors by pointer), and one implementation file over
// the engine's generic path (arguments packed by spec index). ejk/ejk.h includes the C headers
// through ejk/ops/c_ops.h, so it names no op.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "ejk/core/schema.h"
#include "plan.h"

namespace ejk::gen {

// "flash_attention" -> "FlashAttention".
std::string camel_case(std::string_view snake);

std::string render_cpp_header(const OpSchema& s, const std::string& spec_name);
std::string render_c_header(const OpSchema& s, const std::string& spec_name);
std::string render_api_impl(const OpSchema& s, const std::string& spec_name);
// ejk/ops/c_ops.h: every public op's C header.
std::string render_c_list(const std::vector<SpecFile>& specs);
// ejk/ops/types.h: the pair structs the specs name (e.g. SlidingWindow); SpecError when two
// specs give one name different fields.
std::string render_types_header(const std::vector<SpecFile>& specs);

// A generated file and its text, relative to the API output directory:
// include/ejk/ops/<op>.h, include/ejk/ops/<op>_c.h, include/ejk/ops/{c_ops,types}.h, src/<op>_api.cpp.
struct ApiFile {
  std::filesystem::path path;
  std::string text;
};
std::vector<ApiFile> render_api(const std::vector<SpecFile>& specs);

}  // namespace ejk::gen
