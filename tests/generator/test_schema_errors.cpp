// Spec validation: each kind of mistake is an error that names the file, the line and the key.
// Every case starts from a small valid spec and changes one line of it.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <algorithm>

#include "ejk/core/error.h"
#include "ejk/core/schema.h"

using Catch::Matchers::ContainsSubstring;
using ejk::OpSchema;

namespace {

constexpr const char* kFile = "specs/mini.yaml";

const std::string kBase = R"(op: mini_op
api: mini
tensors:
  - {name: x, layout: [N, D], dtypes: [dtype]}
problem:
  seqlen: {default: 128, doc: sequence length}
axes:
  - {name: dtype, kind: enum, values: [f32, bf16]}
  - {name: head_dim, kind: int, prefix: d, values: [64, 128], jit: {min: 8, max: 256, multiple_of: 8}}
  - {name: block, kind: int, prefix: b, values: [32, 64]}
  - {name: causal, kind: flag, token: causal}
backends:
  cpu:
    targets:
      avx2: {flags: ["-march=x86-64-v3"], requires: [avx2]}
    template: mini.cpu.cpp.tmpl
    suffix: .cpp
    constraints:
      - "block * head_dim <= 4096"
    configs:
      - {block: 32}
      - {block: 64}
    heuristic:
      - when: "seqlen <= 32"
        choose: {block: 32}
      - choose: {block: 64}
    aot:
      - {target: [avx2], dtype: [f32], head_dim: [64], block: [64], causal: [false, true]}
)";

int line_of(const std::string& text, const std::string& needle) {
  const size_t pos = text.find(needle);
  REQUIRE(pos != std::string::npos);
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n'));
}

std::string replaced(const std::string& from, const std::string& to) {
  std::string s = kBase;
  const size_t pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

// Parses `text`, expects a SpecError whose message starts with "file:line: key" and contains
// `what`; the line is the one holding `line_needle`.
void expect_error(const std::string& text, const std::string& line_needle, const std::string& key,
                  const std::string& what) {
  const std::string prefix = fmt::format("{}:{}: {}", kFile, line_of(text, line_needle), key);
  INFO("expected: " << prefix << " ... " << what);
  try {
    OpSchema::parse(text, kFile);
    FAIL("the spec was accepted");
  } catch (const ejk::SpecError& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.rfind(prefix, 0) == 0);
    CHECK_THAT(msg, ContainsSubstring(what));
  }
}

}  // namespace

TEST_CASE("spec errors: the base spec is valid", "[spec]") {
  const OpSchema s = OpSchema::parse(kBase, kFile);
  CHECK(s.aot_keys("cpu").size() == 2);
}

TEST_CASE("spec errors: malformed YAML names the line", "[spec]") {
  expect_error(replaced("  seqlen: {default: 128, doc: sequence length}", "  seqlen: [unclosed\n  other: 1"), "other: 1", "yaml",
               "syntax error");
}

TEST_CASE("spec errors: unknown keys are typos", "[spec]") {
  expect_error(replaced("api: mini", "api: mini\napi_version: 2"), "api_version", "api_version",
               "unknown key");
  expect_error(replaced("prefix: b,", "prefx: b,"), "prefx", "axes[2].prefx", "unknown key");
  expect_error(replaced("    suffix: .cpp", "    sufix: .cpp"), "sufix", "backends.cpu.sufix", "unknown key");
  expect_error(replaced("kind: flag, token: causal", "kind: flag, token: causal, values: [1]"), "token: causal",
               "axes[3].values", "not a key of a flag axis");
}

TEST_CASE("spec errors: argument names that are C, C++ or Python keywords", "[spec]") {
  // They become parameters of the generated C and C++ functions and Python keyword arguments.
  expect_error(replaced("{name: x, layout", "{name: do, layout"), "name: do,", "tensors[0].name",
               "'do' is a keyword of C, C++ or Python");
  expect_error(replaced("{name: x, layout", "{name: lambda, layout"), "name: lambda,", "tensors[0].name",
               "'lambda' is a keyword");
}

TEST_CASE("spec errors: missing keys, duplicate keys and wrong types", "[spec]") {
  expect_error(replaced("op: mini_op\n", ""), "api: mini", "op", "missing required key");
  expect_error(replaced("api: mini", "api: mini\nop: again"), "op: again", "op", "duplicate key");
  expect_error(replaced("values: [32, 64]", "values: 32"), "values: 32", "axes[2].values", "expected a list");
  expect_error(replaced("values: [32, 64]", "values: [32, 6x4]"), "6x4", "axes[2].values[1]", "not an integer");
  expect_error(replaced("    suffix: .cpp", "    suffix:"), "suffix:", "backends.cpu.suffix", "has no value");
  expect_error(replaced("kind: flag", "kind: boolean"), "kind: boolean", "axes[3].kind", "expected int, enum or flag");
}

TEST_CASE("spec errors: axis definitions", "[spec]") {
  expect_error(replaced("values: [32, 64]", "values: []"), "values: []", "axes[2].values", "non-empty list");
  expect_error(replaced("name: block,", "name: head_dim,"), "name: head_dim, kind: int, prefix: b", "axes[2].name",
               "duplicate axis name 'head_dim'");
  expect_error(replaced("values: [f32, bf16]", "values: [f32, BF16]"), "BF16", "axes[0].values[1]",
               "not a token");
  expect_error(replaced("prefix: b,", "prefix: d,"), "prefix: d, values: [32", "axes[2].prefix", "also used by axis");
  expect_error(replaced("values: [32, 64]", "values: [32, 32]"), "values: [32, 32]", "axes[2].values[1]",
               "listed twice");
  expect_error(replaced("jit: {min: 8, max: 256", "jit: {min: 300, max: 256"), "min: 300", "axes[1].jit",
               "min <= max");
}

TEST_CASE("spec errors: expressions that do not parse or use unknown names", "[spec]") {
  expect_error(replaced("\"block * head_dim <= 4096\"", "\"block * * head_dim\""), "block * *",
               "backends.cpu.constraints[0]", "column");
  expect_error(replaced("\"block * head_dim <= 4096\"", "\"block * hed_dim <= 4096\""), "hed_dim",
               "backends.cpu.constraints[0]", "unknown identifier 'hed_dim'");
  // A heuristic sees problem variables, not axis values.
  expect_error(replaced("\"seqlen <= 32\"", "\"seqlen_q <= 32\""), "seqlen_q", "backends.cpu.heuristic[0].when",
               "unknown identifier 'seqlen_q'");
}

TEST_CASE("spec errors: heuristics and configs", "[spec]") {
  expect_error(replaced("      - choose: {block: 64}", "      - when: \"seqlen > 1\"\n        choose: {block: 64}"),
               "seqlen > 1", "backends.cpu.heuristic[1]", "last rule must have no 'when'");
  expect_error(replaced("choose: {block: 32}", "choose: {block: 48}"), "choose: {block: 48}",
               "backends.cpu.heuristic[0].choose.block", "outside the domain");
  expect_error(replaced("      - {block: 64}", "      - {head_dim: 64}"), "- {head_dim: 64}",
               "backends.cpu.configs[1]", "same axes");
}

TEST_CASE("spec errors: tuning flags", "[spec]") {
  const std::string with_flag = replaced("  - {name: causal, kind: flag, token: causal}",
                                         "  - {name: causal, kind: flag, token: causal}\n"
                                         "  - {name: wide, kind: flag, token: wide, tuning: true}");
  // A heuristic may choose a tuning flag; the config check looks at the int axes only.
  {
    std::string ok = with_flag;
    ok.replace(ok.find("choose: {block: 32}"), 19, "choose: {block: 32, wide: true}");
    const OpSchema s = OpSchema::parse(ok, kFile);
    CHECK(s.choose_config("cpu", "avx2", {{"seqlen", 8}}) == std::map<std::string, int64_t>{{"block", 32}, {"wide", 1}});
    CHECK(s.choose_config("cpu", "avx2", {{"seqlen", 64}}) == std::map<std::string, int64_t>{{"block", 64}});
  }
  // ... but not a flag an argument sets, nor take the flag in a config or on an int axis.
  expect_error(replaced("choose: {block: 32}", "choose: {block: 32, causal: true}"), "causal: true",
               "backends.cpu.heuristic[0].choose.causal", "not an int axis or a tuning flag");
  {
    std::string cfg = with_flag;
    cfg.replace(cfg.find("      - {block: 32}"), 19, "      - {block: 32, wide: true}");
    expect_error(cfg, "- {block: 32, wide: true}", "backends.cpu.configs[0].wide", "not an int axis");
  }
  expect_error(replaced("prefix: b, values: [32, 64]}", "prefix: b, values: [32, 64], tuning: true}"),
               "tuning: true", "axes[2].tuning", "only a flag axis");
  {
    std::string set = with_flag;
    set.replace(set.find("dtypes: [dtype]}"), 16, "dtypes: [dtype], sets_flag: wide}");
    expect_error(set, "sets_flag: wide", "tensors[0].sets_flag", "is a tuning flag");
  }
}

TEST_CASE("spec errors: AOT sets", "[spec]") {
  expect_error(replaced("head_dim: [64], block", "head_dim: [96], block"), "[96]", "backends.cpu.aot[0].head_dim[0]",
               "not a pre-built value");
  expect_error(replaced("dtype: [f32]", "dtype: [f16]"), "[f16]", "backends.cpu.aot[0].dtype[0]",
               "outside the domain");
  expect_error(replaced("target: [avx2]", "target: [avx512]"), "avx512", "backends.cpu.aot[0].target[0]",
               "not a target");
  expect_error(replaced("causal: [false, true]}", "causal: [false, true], casual: [true]}"), "casual",
               "backends.cpu.aot[0].casual", "unknown axis");
  expect_error(replaced("dtype: [f32], ", ""), "- {target: [avx2]", "backends.cpu.aot[0].dtype",
               "missing required key");
  // 128 * 64 > 4096 violates the constraint.
  expect_error(replaced("head_dim: [64], block: [64]", "head_dim: [128], block: [64]"), "head_dim: [128]",
               "backends.cpu.aot[0]", "violates constraint");
  expect_error(replaced("causal: [false, true]", "causal: [false, yes]"), "yes", "backends.cpu.aot[0].causal[1]",
               "expected true or false");
}

TEST_CASE("spec errors: requirements, flags, modes and constant divisions a call would trip on", "[spec]") {
  expect_error(replaced("requires: [avx2]", "requires: [f16cc]"), "avx2:", "backends.cpu.targets.avx2.requires",
               "unknown CPU feature 'f16cc'");
  expect_error(replaced("requires: [avx2]", "requires: [avx2, ' avx2']"), "avx2:",
               "backends.cpu.targets.avx2.requires", "unknown CPU feature ' avx2'");
  expect_error(replaced("flags: [\"-march=x86-64-v3\"]", "flags: [\"-march=x86\\0-64-v3\"]"), "avx2:",
               "backends.cpu.targets.avx2.flags", "NUL byte");
  expect_error(replaced("\"seqlen <= 32\"", "\"seqlen / 0 <= 32\""), "seqlen / 0", "backends.cpu.heuristic",
               "divides by the constant 0");
  expect_error(replaced("tensors:\n", "modes:\n  - {name: packed, when: y}\n  - {name: packed, when: y}\ntensors:\n"
                                      "  - {name: y, layout: [N], dtypes: [i32], optional: true}\n"),
               "- {name: packed, when: y}\ntensors", "modes[1]", "a second mode named 'packed'");
}
