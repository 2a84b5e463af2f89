// A small integer expression language for spec constraints and heuristics:
// integers, identifiers (axis values; flags are 0/1), + - * / %, comparisons, && || !,
// parentheses, true/false. Example: "head_dim % 8 == 0 && block_q * head_dim <= 16384".
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace ejk {

// Evaluates `expr`; an unknown identifier or a syntax error throws SpecError naming `where`.
int64_t eval_expr(std::string_view expr, const std::map<std::string, int64_t>& vars,
                  std::string_view where);

// The identifiers `expr` uses (true/false excluded), sorted; a syntax error throws SpecError
// naming `where`. The spec parser checks them against the names a context defines, so a typo
// fails when the spec is loaded rather than when a key first reaches that expression.
std::set<std::string> expr_identifiers(std::string_view expr, std::string_view where);

}  // namespace ejk
