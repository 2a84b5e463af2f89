// The spec expression language: precedence, evaluation against C++ on random values,
// short-circuiting, and errors that name where the expression came from.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "ejk/core/error.h"
#include "ejk/core/expr.h"
#include "ejk/core/schema.h"
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

namespace {
std::string repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}
std::string nested_parens(size_t depth) { return repeat("(", depth) + "1" + repeat(")", depth); }
}  // namespace

TEST_CASE("expr: nesting is bounded, so a hostile spec is an error, not a stack overflow", "[expr][limits]") {
  CHECK(eval(nested_parens(256)) == 1);
  CHECK(eval(repeat("!", 256) + "0") == 0);
  CHECK(eval(repeat("-", 256) + "3") == 3);
  // Issue 36, defect 6: ~10,000 parentheses or 50,000 '!' / '-' crashed ejk-gen.
  for (const std::string& deep : {nested_parens(257), nested_parens(10000), repeat("!", 50000) + "1",
                                  repeat("-", 50000) + "1", repeat("(-", 20000) + "1" + repeat(")", 20000)}) {
    CAPTURE(deep.size());
    CHECK_THROWS_AS(eval(deep), SpecError);
    CHECK_THROWS_WITH(eval(deep), ContainsSubstring(kWhere) &&
                                      ContainsSubstring("nests deeper than 256 levels"));
    CHECK_THROWS_WITH(ejk::expr_identifiers(deep, kWhere), ContainsSubstring("nests deeper"));
  }
}

TEST_CASE("expr: long operator chains are bounded too (evaluation recurses over the tree)", "[expr][limits]") {
  CHECK(eval("1" + repeat(" + 1", 1023)) == 1024);
  const std::string chain = "a" + repeat(" * a", 200000);
  CHECK_THROWS_WITH(eval(chain, {{"a", 1}}), ContainsSubstring(kWhere) &&
                                                 ContainsSubstring("more than 1024 operators"));
  // The message quotes the start of the expression, not all 1.2 MB of it.
  try {
    eval(chain, {{"a", 1}});
  } catch (const SpecError& e) {
    CHECK(std::string_view(e.what()).size() < 400);
    CHECK_THAT(e.what(), ContainsSubstring("(800001 characters)"));
  }
}

TEST_CASE("expr: a too-deep constraint in a spec is reported at its file:line", "[expr][limits]") {
  std::ifstream in(ejk::test::source_root() / "specs" / "flash_attention.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string spec = text.str();
  // The first list item after the first "constraints:" key becomes a 300-deep expression.
  size_t key = spec.find("\n    constraints:\n");
  if (key == std::string::npos) SKIP("the spec has no 'constraints:' list where this test expects one");
  size_t item = spec.find("- \"", key);
  REQUIRE(item != std::string::npos);
  size_t end = spec.find('\n', item);
  const int line = 1 + static_cast<int>(std::count(spec.begin(), spec.begin() + static_cast<std::ptrdiff_t>(item), '\n'));
  spec.replace(item, end - item, "- \"" + nested_parens(300) + " == 1\"");
  CHECK_THROWS_WITH(ejk::OpSchema::parse(spec, "specs/flash_attention.yaml", ejk::test::target_table()),
                    ContainsSubstring("specs/flash_attention.yaml:" + std::to_string(line) + ":") &&
                        ContainsSubstring("nests deeper than 256 levels"));
}

TEST_CASE("spec: deeply nested YAML is a clear error at a line, not a crash", "[expr][limits][yaml]") {
  // yaml-cpp bounds its own recursion; the spec reader says what the bound means.
  const std::string flow = repeat("[", 100000) + repeat("]", 100000);
  CHECK_THROWS_WITH(ejk::OpSchema::parse(flow, "deep.yaml"),
                    ContainsSubstring("deep.yaml:1: yaml: nested too deeply"));
  const std::string maps = repeat("{a: ", 100000) + "1" + repeat("}", 100000);
  CHECK_THROWS_WITH(ejk::OpSchema::parse(maps, "deep.yaml"), ContainsSubstring("nested too deeply"));
  std::string block;
  for (int i = 0; i < 3000; ++i) block += std::string(static_cast<size_t>(i), ' ') + "a:\n";
  CHECK_THROWS_WITH(ejk::OpSchema::parse(block, "block.yaml"),
                    ContainsSubstring("block.yaml:") && ContainsSubstring("nested too deeply"));
}
