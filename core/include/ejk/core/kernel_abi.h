// The fingerprint of the code a CPU variant is compiled against: the kernel headers (params
// structs, task decomposition) and templates, with the generator's version. A program that
// compiles variants itself (ejk_generate_kernels) passes the fingerprint of the headers it used,
// and libejk refuses them unless it was built from the same ones: a changed params struct would
// otherwise be read with the wrong layout, silently.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ejk {

struct NamedText {
  std::string_view path;  // as embedded in the registry: "templates/x.tmpl", "ejk/kernels/..."
  std::string_view text;
};

// "<generator version>-<16 hex digits>": a 64-bit FNV-1a over the files sorted by path, each
// path and text length-prefixed. The order the files come in does not matter.
std::string kernel_abi_fingerprint(std::string_view generator_version, std::vector<NamedText> files);

}  // namespace ejk
