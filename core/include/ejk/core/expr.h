// A small integer expression language for spec constraints and heuristics:
// integers, identifiers (axis values; flags are 0/1), + - * / %, comparisons, && || !,
// parentheses, true/false. Example: "head_dim % 8 == 0 && block_q * head_dim <= 16384".
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace ejk {

// Evaluates `expr`; an unknown identifier or a syntax error throws SpecError naming `where`.
int64_t eval_expr(std::string_view expr, const std::map<std::string, int64_t>& vars,
                  std::string_view where);

}  // namespace ejk
