// The spec expression language: precedence, evaluation against C++ on random values,
// short-circuiting, and errors that name where the expression came from.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "test_support.h"

using Catch::Matchers::ContainsSubstring;
using ejk::eval_expr;
using ejk::SpecError;

namespace {
constexpr const char* kWhere = "specs/t.yaml:7: backends.cpu.constraints[0]";
int64_t eval(const std::string& e, const std::map<std::string, int64_t>& vars = {}) {
  return eval_expr(e, vars, kWhere);
}
}  // namespace

TEST_CASE("expr: precedence and associativity follow C", "[expr]") {
  CHECK(eval("1 + 2 * 3") == 7);
  CHECK(eval("(1 + 2) * 3") == 9);
  CHECK(eval("10 - 4 - 3") == 3);
  CHECK(eval("64 / 4 / 2") == 8);
  CHECK(eval("-7 / 2") == -3);
  CHECK(eval("-7 % 3") == -1);
  CHECK(eval("--3") == 3);
  CHECK(eval("!0") == 1);
  CHECK(eval("!5") == 0);
  CHECK(eval("1 || 0 && 0") == 1);
  CHECK(eval("(1 || 0) && 0") == 0);
  CHECK(eval("1 + 1 == 2") == 1);
  CHECK(eval("2 < 3 == 1") == 1);
  CHECK(eval("3 <= 3 && 4 >= 5") == 0);
  CHECK(eval("3 != 4 && 4 > 3") == 1);
  CHECK(eval("true && !false") == 1);
}

TEST_CASE("expr: arithmetic and comparisons match C++ on random values", "[expr]") {
  for (int i = 0; i < 200; ++i) {
    const int64_t a = ejk::test::random_int(-100000, 100000);
    const int64_t b = ejk::test::random_int(1, 5000) * (ejk::test::random_int(0, 1) ? 1 : -1);
    const int64_t c = ejk::test::random_int(-100000, 100000);
    const std::map<std::string, int64_t> v = {{"a", a}, {"b", b}, {"c", c}};
    INFO("a=" << a << " b=" << b << " c=" << c);
    CHECK(eval("a * b + c", v) == a * b + c);
    CHECK(eval("a / b - c % b", v) == a / b - c % b);
    CHECK(eval("a - (b - c)", v) == a - (b - c));
    CHECK(eval("a < c || b >= c", v) == (a < c || b >= c ? 1 : 0));
    CHECK(eval("!(a == c) && a % b != 0", v) == ((a != c && a % b != 0) ? 1 : 0));
  }
}

TEST_CASE("expr: a spec constraint over random axis values", "[expr]") {
  for (int i = 0; i < 100; ++i) {
    const int64_t head_dim = ejk::test::random_int(1, 64) * 4;
    const int64_t block_q = ejk::test::random_int(1, 16) * 16;
    INFO("head_dim=" << head_dim << " block_q=" << block_q);
    const bool expected = head_dim % 8 == 0 && block_q * head_dim <= 16384;
    CHECK(eval("head_dim % 8 == 0 && block_q * head_dim <= 16384",
               {{"head_dim", head_dim}, {"block_q", block_q}}) == (expected ? 1 : 0));
  }
}

TEST_CASE("expr: && and || short-circuit, so a guarded division is safe", "[expr]") {
  CHECK(eval("b != 0 && a / b > 1", {{"a", 9}, {"b", 0}}) == 0);
  CHECK(eval("b == 0 || a / b > 1", {{"a", 9}, {"b", 0}}) == 1);
  CHECK_THROWS_WITH(eval("a / b > 1", {{"a", 9}, {"b", 0}}), ContainsSubstring("division by zero"));
  CHECK_THROWS_WITH(eval("a % b", {{"a", 9}, {"b", 0}}), ContainsSubstring(kWhere));
}

TEST_CASE("expr: errors name where the expression is and what is wrong", "[expr]") {
  CHECK_THROWS_AS(eval("hed_dim % 8 == 0", {{"head_dim", 64}}), SpecError);
  CHECK_THROWS_WITH(eval("hed_dim % 8 == 0", {{"head_dim", 64}}),
                    ContainsSubstring(kWhere) && ContainsSubstring("unknown identifier 'hed_dim'") &&
                        ContainsSubstring("head_dim"));
  for (const char* bad : {"1 +", "(1 + 2", "1 2", "a ==", "", "   ", "1 $ 2", "12ab", "* 3", "()"}) {
    INFO("expression: '" << bad << "'");
    CHECK_THROWS_AS(eval(bad, {{"a", 1}}), SpecError);
    CHECK_THROWS_WITH(eval(bad, {{"a", 1}}), ContainsSubstring(kWhere));
  }
  CHECK_THROWS_WITH(eval("(1 + 2"), ContainsSubstring("expected ')'") && ContainsSubstring("column 7"));
  CHECK_THROWS_WITH(eval("9223372036854775807 + 1"), ContainsSubstring("overflow"));
  CHECK_THROWS_WITH(eval("99999999999999999999"), ContainsSubstring("does not fit"));
  CHECK_THROWS_WITH(eval("4611686018427387904 * 2"), ContainsSubstring("overflow"));
}

TEST_CASE("expr: identifiers are listed without evaluating", "[expr]") {
  CHECK(ejk::expr_identifiers("a + b * a > c || true", kWhere) == std::set<std::string>{"a", "b", "c"});
  CHECK(ejk::expr_identifiers("x / 0", kWhere) == std::set<std::string>{"x"});
  CHECK(ejk::expr_identifiers("false", kWhere).empty());
  CHECK_THROWS_WITH(ejk::expr_identifiers("a +", kWhere), ContainsSubstring(kWhere));
}
