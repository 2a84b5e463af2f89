// Template rendering: substitution, and errors that name the template and the line.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "ejk/core/error.h"
#include "ejk/core/render.h"
#include "test_support.h"

using Catch::Matchers::ContainsSubstring;
using ejk::render_template;

namespace {
std::string random_word() {
  std::string s;
  for (int64_t i = 0, n = ejk::test::random_int(1, 12); i < n; ++i)
    s += static_cast<char>('a' + ejk::test::random_int(0, 25));
  return s;
}
}  // namespace

TEST_CASE("render: placeholders are replaced, everything else is kept", "[render]") {
  for (int i = 0; i < 50; ++i) {
    const std::string a = random_word(), b = random_word();
    const std::string text = "x {{a}} y {{ b }}\n{{a}}{{a}} {single} }} {";
    const std::string want = "x " + a + " y " + b + "\n" + a + a + " {single} }} {";
    CHECK(render_template(text, {{"a", a}, {"b", b}, {"unused", "z"}}, "t.tmpl") == want);
  }
  CHECK(render_template("no placeholders\n", {}, "t.tmpl") == "no placeholders\n");
  CHECK(render_template("", {}, "t.tmpl").empty());
}

TEST_CASE("render: the same inputs render the same text", "[render]") {
  const std::map<std::string, std::string> vars = {{"k", random_word()}, {"v", random_word()}};
  const std::string text = "{{k}} = {{v}};\n// {{k}}\n";
  CHECK(render_template(text, vars, "t.tmpl") == render_template(text, vars, "t.tmpl"));
}

TEST_CASE("render: template errors name the template and the line", "[render]") {
  const std::map<std::string, std::string> vars = {{"a", "1"}};
  CHECK_THROWS_AS(render_template("line1\nline2 {{b}}\n", vars, "templates/x.tmpl"), ejk::SpecError);
  CHECK_THROWS_WITH(render_template("line1\nline2 {{b}}\n", vars, "templates/x.tmpl"),
                    ContainsSubstring("templates/x.tmpl:2:") && ContainsSubstring("unknown placeholder 'b'"));
  CHECK_THROWS_WITH(render_template("{{a}}\n\n{{a\n}}", vars, "templates/x.tmpl"),
                    ContainsSubstring("templates/x.tmpl:3:") && ContainsSubstring("unterminated"));
  CHECK_THROWS_WITH(render_template("ok {{a}} {{", vars, "t.tmpl"),
                    ContainsSubstring("t.tmpl:1:") && ContainsSubstring("unterminated"));
  CHECK_THROWS_WITH(render_template("{{1a}}", vars, "t.tmpl"),
                    ContainsSubstring("t.tmpl:1:") && ContainsSubstring("malformed"));
  CHECK_THROWS_WITH(render_template("{{}}", vars, "t.tmpl"), ContainsSubstring("malformed"));
}
