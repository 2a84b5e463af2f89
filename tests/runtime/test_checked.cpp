// Overflow-checked sizes and strict decimals (ejk/core/checked.h; issue 36, defects 3 and 8).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <vector>

#include "ejk/core/checked.h"

using Catch::Matchers::ContainsSubstring;

TEST_CASE("checked: products and sums that overflow name the argument", "[checked]") {
  CHECK(ejk::checked_mul(1 << 20, 1 << 20, "x") == int64_t{1} << 40);
  CHECK(ejk::checked_add(INT64_MAX - 1, 1, "x") == INT64_MAX);
  CHECK_THROWS_WITH(ejk::checked_mul(INT64_MAX / 2 + 1, 2, "q"),
                    ContainsSubstring("q: size overflows a 64-bit integer"));
  CHECK_THROWS_AS(ejk::checked_add(INT64_MAX, 1, "k"), ejk::InvalidArgument);
  CHECK_THROWS_AS(ejk::checked_mul(INT64_MIN, -1, "k"), ejk::InvalidArgument);
}

TEST_CASE("checked: numel of the issue's shape overflows instead of wrapping to 256 bytes", "[checked]") {
  // --b 2147549185 --sq 2147418113 --hq 1 --d 64: the product wraps around in int64.
  const std::vector<int64_t> q = {2147549185, 2147418113, 1, 64};
  CHECK_THROWS_WITH(ejk::checked_numel(q, "q"), ContainsSubstring("q: size overflows"));
  CHECK_THROWS_WITH(ejk::checked_nbytes(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 30}, 2, "k"), ContainsSubstring("k:"));
  CHECK(ejk::checked_numel(std::vector<int64_t>{2, 3, 4}, "x") == 24);
  CHECK(ejk::checked_numel(std::vector<int64_t>{}, "x") == 1);
  CHECK(ejk::checked_numel(std::vector<int64_t>{5, 0, INT64_MAX}, "x") == 0);
  CHECK(ejk::checked_nbytes(std::vector<int64_t>{2, 3}, 4, "x") == 24);
  CHECK_THROWS_WITH(ejk::checked_numel(std::vector<int64_t>{2, -3}, "v"),
                    ContainsSubstring("v: dimension 1 is negative (-3)"));
}

TEST_CASE("checked: parse_decimal takes plain decimals only", "[checked][parse]") {
  using ejk::parse_decimal;
  CHECK(parse_decimal("0", 0, 10) == 0);
  CHECK(parse_decimal("64", 0, 100) == 64);
  CHECK(parse_decimal("-7", -10, 10) == -7);
  CHECK(parse_decimal("9223372036854775807", 0, INT64_MAX) == INT64_MAX);
  CHECK(parse_decimal("-9223372036854775808", INT64_MIN, 0) == INT64_MIN);
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "0100", "00", "-0", "5abc", "0x10", "1e3",
                          "9223372036854775808", "-9223372036854775809", "99999999999999999999",
                          "1,2", "\xd9\xa1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_decimal(bad, INT64_MIN, INT64_MAX).has_value());
  }
  CHECK_FALSE(parse_decimal("11", 0, 10).has_value());
  CHECK_FALSE(parse_decimal("-1", 0, 10).has_value());
}
