// The linear-time matcher for user patterns (ejk/core/pattern.h): ECMAScript's meaning on the
// subset it takes, refusals that name the problem, and no pattern that hangs or overflows.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <chrono>
#include <string>

#include "ejk/core/error.h"
#include "ejk/core/pattern.h"

using Catch::Matchers::ContainsSubstring;

namespace {

bool matches(const std::string& pattern, const std::string& text) { return ejk::Pattern(pattern, "--variants").search(text); }

std::string refusal(const std::string& pattern) {
  try {
    ejk::Pattern(pattern, "--variants");
  } catch (const ejk::InvalidArgument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("pattern: searches as ECMAScript regular expressions do", "[pattern]") {
  const std::string key = "flash_fwd.cpu.avx512.f32.d64.bq64.bk64";
  CHECK(matches("flash_fwd", key));
  CHECK(matches("^flash", key));
  CHECK_FALSE(matches("^fwd", key));
  CHECK(matches("bk64$", key));
  CHECK_FALSE(matches("bq64$", key));
  CHECK(matches("avx(2|512)\\.f32", key));
  CHECK_FALSE(matches("avx(2|10)\\.f32", key));
  CHECK(matches("d(64|128)\\.", key));
  CHECK(matches("\\.d\\d+\\.", key));
  CHECK(matches("(?:bf16|f32)", key));
  CHECK(matches("[a-z]+_fwd", key));
  CHECK_FALSE(matches("[a-f]+_fwd", key));
  CHECK_FALSE(matches("[^a-z_]fwd", key));
  CHECK(matches("^a{2,3}$", "aaa"));
  CHECK_FALSE(matches("^a{2,3}$", "aaaa"));
  CHECK(matches("^a{2,}$", "aaaaaa"));
  CHECK_FALSE(matches("^a{2}$", "a"));
  CHECK(matches("^(ab)+c$", "ababc"));
  CHECK_FALSE(matches("^(ab)+c$", "abac"));
  CHECK(matches("x.*?y", "x--y"));
  CHECK(matches("", "anything"));
  CHECK(matches(".*", ""));
  CHECK(matches("[]x]", "]"));
  CHECK(matches("a[-z]", "a-"));
  CHECK(matches("a\\-b", "a-b"));
  CHECK_FALSE(matches(".", "\n"));
}

TEST_CASE("pattern: what it cannot take is refused by name and position", "[pattern]") {
  CHECK_THAT(refusal("(mean"), ContainsSubstring("unmatched '('"));
  CHECK_THAT(refusal("mean)"), ContainsSubstring("unmatched ')'"));
  CHECK_THAT(refusal("*mean"), ContainsSubstring("nothing to repeat"));
  CHECK_THAT(refusal("a**"), ContainsSubstring("a quantifier after a quantifier"));
  CHECK_THAT(refusal("(a)\\1"), ContainsSubstring("'\\1' is not supported"));
  CHECK_THAT(refusal("(?=a)"), ContainsSubstring("only (?:...) groups"));
  CHECK_THAT(refusal("[z-a]"), ContainsSubstring("end is before its start"));
  CHECK_THAT(refusal("[abc"), ContainsSubstring("unmatched '['"));
  CHECK_THAT(refusal("a{1001}"), ContainsSubstring("above 1000"));
  CHECK_THAT(refusal("a{3,2}"), ContainsSubstring("n < m"));
  CHECK_THAT(refusal("(a{1000}){1000}"), ContainsSubstring("instructions"));
  CHECK_THAT(refusal("abc\\"), ContainsSubstring("trailing"));
  CHECK_THAT(refusal("(a"), ContainsSubstring("--variants: '(a' is not a valid pattern"));
}

TEST_CASE("pattern: nesting is bounded and matching is linear in the text", "[pattern]") {
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  const std::string why = refusal(deep);
  CHECK_THAT(why, ContainsSubstring("nested deeper than"));
  CHECK(why.size() < 200);  // the message shows the start of the pattern, not all of it
  CHECK(refusal(std::string(64, '(') + "a" + std::string(64, ')')) == "accepted");
  // Exponential for a backtracking matcher; here the work is text length x program size.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(matches("(.*)*(a|aa)*X", std::string(100000, 'a')));
  CHECK_FALSE(matches("^(a+)+$", std::string(100000, 'a') + "b"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20);
}
