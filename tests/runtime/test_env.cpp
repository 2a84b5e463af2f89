// Strict environment parsing (issue 36, defect 8): every accepted spelling, and a clear error
// naming the variable for anything else.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "cache/get_or_build.h"
#include "ejk/core/error.h"
#include "test_support.h"
#include "util/env.h"

using Catch::Matchers::ContainsSubstring;
using ejk::test::ScopedEnv;

namespace {
constexpr const char* kVar = "EJK_TEST_ENV_VALUE";
}

TEST_CASE("env: env_int takes plain decimals in range only", "[env]") {
  {
    ScopedEnv unset(kVar, std::nullopt);
    CHECK(ejk::util::env_int(kVar, 1, 10, 7) == 7);
  }
  {
    ScopedEnv empty(kVar, "");
    CHECK(ejk::util::env_int(kVar, 1, 10, 7) == 7);
  }
  for (auto [text, value] : {std::pair{"1", 1}, {"10", 10}, {"5", 5}}) {
    ScopedEnv env(kVar, text);
    CHECK(ejk::util::env_int(kVar, 1, 10, 7) == value);
  }
  {
    ScopedEnv neg(kVar, "-5");
    CHECK(ejk::util::env_int(kVar, -10, 10, 0) == -5);
  }
  for (const char* bad : {"0", "11", "abc", "5abc", "05", "+5", " 5", "5 ", "-0", "0x5", "5.0",
                          "99999999999999999999", "-"}) {
    CAPTURE(bad);
    ScopedEnv env(kVar, bad);
    CHECK_THROWS_AS(ejk::util::env_int(kVar, 1, 10, 7), ejk::InvalidArgument);
    CHECK_THROWS_WITH(ejk::util::env_int(kVar, 1, 10, 7),
                      ContainsSubstring(kVar) && ContainsSubstring("from 1 to 10"));
  }
}

TEST_CASE("env: env_bool takes exactly 0/1/true/false/yes/no/on/off", "[env]") {
  for (const char* yes : {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"}) {
    ScopedEnv env(kVar, yes);
    CHECK(ejk::util::env_bool(kVar, false));
  }
  for (const char* no : {"0", "false", "FALSE", "no", "No", "off", "OFF"}) {
    ScopedEnv env(kVar, no);
    CHECK_FALSE(ejk::util::env_bool(kVar, true));
  }
  {
    ScopedEnv unset(kVar, std::nullopt);
    CHECK(ejk::util::env_bool(kVar, true));
  }
  for (const char* bad : {"2", "y", "yes please", " 1", "1 ", "nope", "enable", "-1"}) {
    CAPTURE(bad);
    ScopedEnv env(kVar, bad);
    CHECK_THROWS_WITH(ejk::util::env_bool(kVar, false),
                      ContainsSubstring(kVar) && ContainsSubstring(bad) &&
                          ContainsSubstring("expected 1, 0, true, false, yes, no, on or off"));
  }
}

TEST_CASE("env: env_string and env_path", "[env]") {
  {
    ScopedEnv unset(kVar, std::nullopt);
    CHECK_FALSE(ejk::util::env_string(kVar).has_value());
    CHECK_FALSE(ejk::util::env_path(kVar).has_value());
  }
  {
    ScopedEnv set(kVar, "/a/b/../c/");
    CHECK(ejk::util::env_string(kVar) == "/a/b/../c/");
    CHECK(ejk::util::env_path(kVar) == std::filesystem::path("/a/c/"));
  }
  {
    ScopedEnv tilde(kVar, "~");  // EJK_CACHE_DIR='~' once made a folder "./~"
    CHECK_THROWS_WITH(ejk::util::env_path(kVar), ContainsSubstring("'~' is expanded only by a shell"));
  }
  ScopedEnv relative(kVar, "rel/dir");
  CHECK(ejk::util::env_path(kVar) == std::filesystem::current_path() / "rel" / "dir");
}

TEST_CASE("env: EJK_DISABLE_JIT is a strict boolean", "[env][get_or_build]") {
  {
    ScopedEnv yes("EJK_DISABLE_JIT", "yes");
    CHECK(ejk::cache::jit_disabled());  // was silently ignored
  }
  {
    ScopedEnv off("EJK_DISABLE_JIT", "off");
    CHECK_FALSE(ejk::cache::jit_disabled());
  }
  ScopedEnv bad("EJK_DISABLE_JIT", "maybe");
  CHECK_THROWS_WITH(ejk::cache::jit_disabled(), ContainsSubstring("EJK_DISABLE_JIT=\"maybe\""));
}
