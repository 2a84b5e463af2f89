// Spec validation of the argument sections (modes, layouts, scalars, problem variables): each
// mistake is an error naming the file, the line and the key, as in test_schema_errors.cpp.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>

#include "ejk/core/error.h"
#include "ejk/core/schema.h"

using Catch::Matchers::ContainsSubstring;
using ejk::OpSchema;

namespace {

constexpr const char* kFile = "specs/args.yaml";

const std::string kBase = R"(op: args_op
api: args
modes:
  - {name: packed, when: cu, forbids: [bias]}
together:
  - [ids_a, ids_b]
tensors:
  - {name: x, layout: [B, T, D], packed: ["1?", Tt, D], dtypes: [dtype]}
  - {name: bias, layout: ["B|1", T], dtypes: [dtype], optional: true, sets_flag: biased}
  - {name: ids_a, layout: [B, T], dtypes: [i32], optional: true}
  - {name: ids_b, layout: [B, T], dtypes: [i32], optional: true}
  - {name: cu, layout: ["N+1"], dtypes: [i32], optional: true, contiguous: true}
  - {name: lead, layout: [..., D], dtypes: [f32], optional: true}
  - {name: y, layout: [B, D], packed: [N, D], dtypes: [dtype], output: true}
  - {name: z, like: x, dtypes: [dtype], output: true}
scalars:
  - {name: scale, type: f32, default: "1"}
  - {name: count, type: i64, default: none, binds: M}
problem:
  width: {doc: "the key's width"}
  rows: {default: 64, doc: rows}
  wide: {expr: "width > 64", doc: wide rows}
axes:
  - {name: dtype, kind: enum, values: [f32, bf16]}
  - {name: width, kind: int, prefix: w, values: [64], from: D}
  - {name: biased, kind: flag, token: bias}
backends:
  cpu:
    targets:
      generic: {flags: ["-march=x86-64"]}
    template: args.cpu.cpp.tmpl
    suffix: .cpp
    aot:
      - {target: [generic], dtype: [f32], width: [64]}
)";

std::string replaced(const std::string& from, const std::string& to) {
  std::string s = kBase;
  const size_t pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

void expect_error(const std::string& text, const std::string& key, const std::string& what) {
  INFO("expected: " << key << " ... " << what);
  try {
    OpSchema::parse(text, kFile);
    FAIL("the spec was accepted");
  } catch (const ejk::SpecError& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.rfind(kFile, 0) == 0);
    CHECK_THAT(msg, ContainsSubstring(key) && ContainsSubstring(what));
  }
}

}  // namespace

TEST_CASE("spec args: the base spec parses into layouts, modes and symbols", "[spec][args]") {
  const OpSchema s = OpSchema::parse(kBase, kFile);
  REQUIRE(s.modes().size() == 1);
  CHECK(s.modes()[0].when == "cu");
  const ejk::TensorArgDef& x = s.tensors()[s.tensor_index("x")];
  CHECK(x.layout.text == "[B, T, D]");
  CHECK(x.layout_in("packed").text == "[1?, Tt, D]");
  CHECK(x.layout_in("packed").required_rank() == 2);
  const ejk::TensorArgDef& cu = s.tensors()[s.tensor_index("cu")];
  CHECK(cu.layout.dims[0].value == 1);
  CHECK(s.tensors()[s.tensor_index("lead")].layout.has_ellipsis());
  CHECK(s.tensors()[s.tensor_index("bias")].layout.dims[0].broadcast);
  CHECK(s.scalars()[s.scalar_index("count")].binds >= 0);
  CHECK(s.axis("width").from == "D");
  CHECK(s.together().size() == 1);
}

TEST_CASE("spec args: layout tokens", "[spec][args]") {
  expect_error(replaced("layout: [B, T, D]", "layout: [B, T-1, D]"), "tensors[0].layout", "expected a size symbol");
  expect_error(replaced("layout: [B, T, D]", "layout: [B, \"T?\", D]"), "tensors[0].layout", "must come first");
  expect_error(replaced("layout: [..., D]", "layout: [D, ...]"), "tensors[5].layout", "must come first");
  expect_error(replaced("layout: [\"N+1\"]", "layout: [\"N+x\"]"), "tensors[4].layout", "SYMBOL+N");
}

TEST_CASE("spec args: outputs are sized by inputs", "[spec][args]") {
  expect_error(replaced("layout: [B, D], packed: [N, D], dtypes: [dtype], output: true",
                        "layout: [B, Q], packed: [N, D], dtypes: [dtype], output: true"),
               "tensors.y", "output dim 'Q' is not the size of any input's dim");
  // A scalar that binds the symbol sizes it.
  CHECK_NOTHROW(OpSchema::parse(replaced("layout: [B, D], packed: [N, D], dtypes: [dtype], output: true",
                                         "layout: [B, M], packed: [N, D], dtypes: [dtype], output: true"), kFile));
  expect_error(replaced("{name: z, like: x,", "{name: z, like: nope,"), "like", "'nope' is not a required input tensor");
  expect_error(replaced("{name: z, like: x, dtypes: [dtype], output: true}", "{name: z, like: x, dtypes: [dtype]}"),
               "like", "only outputs take another tensor's shape");
  CHECK_NOTHROW(OpSchema::parse(replaced("{name: z, like: x,", "{name: z, like: x, in_place: [x],"), kFile));
  expect_error(replaced("{name: z, like: x,", "{name: z, like: x, in_place: [nope],"), "in_place",
               "'nope' is not an input tensor");
  expect_error(replaced("{name: z, like: x, dtypes: [dtype], output: true}", "{name: z, like: x, dtypes: [dtype], in_place: [x]}"),
               "in_place", "only outputs can be written in place");
}

TEST_CASE("spec args: modes, groups and scalars", "[spec][args]") {
  expect_error(replaced("when: cu,", "when: x,"), "modes.packed.when", "'x' is not an optional input tensor");
  expect_error(replaced("forbids: [bias]", "forbids: [biass]"), "modes.packed", "forbids unknown argument 'biass'");
  expect_error(replaced("  - [ids_a, ids_b]", "  - [ids_a, ids_c]"), "together", "unknown argument 'ids_c'");
  expect_error(replaced("type: i64, default: none, binds: M", "type: f32, default: none, binds: M"), "scalars[1].binds",
               "an i64 scalar binds a size symbol");
  expect_error(replaced("type: f32, default: \"1\"", "type: f16, default: \"1\""), "scalars[0].type",
               "expected f32, f64, i64, bool or i64[2]");
  expect_error(replaced("{name: x, layout: [B, T, D], packed:", "{name: x, layout: [B, T, D], packd:"), "tensors[0].packd",
               "unknown key");
}

TEST_CASE("spec args: problem variables have exactly one source", "[spec][args]") {
  expect_error(replaced("rows: {default: 64, doc: rows}", "rows: {doc: rows}"), "problem.rows", "exactly one source");
  expect_error(replaced("rows: {default: 64, doc: rows}", "rows: {default: 64, expr: \"width\", doc: rows}"),
               "problem.rows", "exactly one source");
  expect_error(replaced("expr: \"width > 64\"", "expr: \"widht > 64\""), "problem.wide.expr",
               "'widht' is not an axis or enum value");
  expect_error(replaced("from: D}", "from: E}"), "axes.width.from", "'E' is not a size symbol");
}

TEST_CASE("spec args: an output like a whole-contiguous input is whole-contiguous", "[spec][args]") {
  const OpSchema s = OpSchema::parse(replaced("{name: z, like: x,", "{name: z, like: cu, optional: true,"), kFile);
  CHECK(s.tensors()[size_t(s.tensor_index("z"))].contiguous);
  CHECK_FALSE(OpSchema::parse(kBase, kFile).tensors()[size_t(OpSchema::parse(kBase, kFile).tensor_index("z"))].contiguous);
}

TEST_CASE("spec: tolerance per element type over the defaults", "[spec][args]") {
  const OpSchema plain = OpSchema::parse(kBase, kFile);
  CHECK(plain.tolerance().at("f32") == 1e-5);
  CHECK(plain.tolerance().at("bf16") == 1e-2);
  const OpSchema loose = OpSchema::parse(replaced("problem:", "tolerance: {bf16: 2e-2}\nproblem:"), kFile);
  CHECK(loose.tolerance().at("bf16") == 2e-2);
  CHECK(loose.tolerance().at("f16") == 1e-2);
  expect_error(replaced("problem:", "tolerance: {f64: 1e-9}\nproblem:"), "tolerance.f64", "expected an element type");
  expect_error(replaced("problem:", "tolerance: {f32: 2}\nproblem:"), "tolerance.f32", "a number in (0, 1)");
  expect_error(replaced("problem:", "tolerance: {f32: 1e-5x}\nproblem:"), "tolerance.f32", "a number in (0, 1)");
}
