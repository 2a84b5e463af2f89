// Strict CLI option parsing (issue 36, defect 8): the reproducers of silently accepted values
// and the forms each helper takes; every error names the option and the expected form.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ejk/core/error.h"
#include "parse.h"

using Catch::Matchers::ContainsSubstring;
using namespace ejk::cli;

TEST_CASE("parse: integers are plain decimals in range", "[parse]") {
  CHECK(parse_int("64", "--d", 1, 1024) == 64);
  CHECK(parse_int("0", "--sq", 0, 100) == 0);
  CHECK(parse_int("-5", "--x", -10, 10) == -5);
  // --d 0100 was read as octal 64; --sq '' as 0; --b 5abc as 5.
  for (const char* bad : {"0100", "", "5abc", "+5", " 5", "5 ", "0x40", "6.0", "1e2", "-0", "--5",
                          "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_int(bad, "--d", 1, 1024), ejk::InvalidArgument);
    CHECK_THROWS_WITH(parse_int(bad, "--d", 1, 1024),
                      ContainsSubstring("--d: expected a decimal integer from 1 to 1024, got '" +
                                        std::string(bad) + "'"));
  }
  CHECK_THROWS_WITH(parse_int("-3", "--b", 1, 1 << 20), ContainsSubstring("--b: expected"));
  CHECK_THROWS_WITH(parse_int("4096", "--d", 1, 1024), ContainsSubstring("got '4096'"));
  CHECK_THROWS_WITH(parse_int("2147549185", "--b", 1, INT32_MAX), ContainsSubstring("--b"));
}

TEST_CASE("parse: floats are finite decimals", "[parse]") {
  CHECK(parse_float("30", "--softcap") == 30.0);
  CHECK(parse_float("-0.5", "--scale") == -0.5);
  CHECK(parse_float("1e-3", "--scale") == 1e-3);
  CHECK(parse_float("0", "--scale") == 0.0);
  for (const char* bad : {"", "inf", "-inf", "nan", "NaN", "1e999", "0x1p3", "3abc", " 3", "3 ",
                          "+3", "1,5", "infinity"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_float(bad, "--softcap"),
                      ContainsSubstring("--softcap: expected a finite decimal number"));
  }
}

TEST_CASE("parse: pairs are W or L,R exactly", "[parse]") {
  auto w = parse_int_pair("5", "--window", 0, 1 << 30);
  CHECK((w.first == 5 && w.second == 5));
  auto lr = parse_int_pair("512,0", "--window", 0, 1 << 30);
  CHECK((lr.first == 512 && lr.second == 0));
  // --window 5abc was (5,5); --window 1,2,3 was (1,2).
  for (const char* bad : {"5abc", "1,2,3", "", ",", "1,", ",2", "1, 2", "-1,2", "a,b", "1;2"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_int_pair(bad, "--window", 0, 1 << 30),
                      ContainsSubstring("--window: expected W or L,R") &&
                          ContainsSubstring("got '" + std::string(bad) + "'"));
  }
}

TEST_CASE("parse: size lists", "[parse]") {
  CHECK(parse_size_list("64", "--seqlens", 1, 1 << 20) == std::vector<int64_t>{64});
  CHECK(parse_size_list("1,2,3", "--seqlens", 1, 1 << 20) == std::vector<int64_t>{1, 2, 3});
  for (const char* bad : {"", "1,,2", "1,2,", "1 2", "0", "1,x"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_size_list(bad, "--seqlens", 1, 1 << 20),
                      ContainsSubstring("--seqlens: expected a comma-separated list"));
  }
}
