// Fuzz target: the spec expression language. Any input may be rejected with a SpecError; any
// other exception, crash, overflow or UB is a finding.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    // Every identifier gets a value derived from its name, so evaluation runs too.
    std::map<std::string, int64_t> vars;
    for (const std::string& id : ejk::expr_identifiers(text, "fuzz.yaml:1: expr"))
      vars[id] = static_cast<int64_t>(id.size()) * 37 - 64 + (id.front() & 7);
    (void)ejk::eval_expr(text, vars, "fuzz.yaml:1: expr");
  } catch (const ejk::SpecError&) {
  }
  return 0;
}
