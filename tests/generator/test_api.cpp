// The typed APIs ejk-gen emits from the specs (generator/src/api.h): the C++ header, the C
// header with its versioned options, the implementation packing by spec index, the list header
// ejk/ejk.h includes, and the spec keys they read (ranges, pair structs).
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "api.h"
#include "ejk/core/error.h"
#include "files.h"
#include "generate.h"
#include "test_support.h"

using Catch::Matchers::ContainsSubstring;
using ejk::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::vector<ejk::gen::SpecFile>& specs() {
  static const auto s = ejk::gen::load_specs(ejk::test::source_root() / "specs");
  return s;
}

const ejk::gen::SpecFile& spec_of(const std::string& api) {
  for (const auto& s : specs())
    if (s.schema.api() == api) return s;
  FAIL("no spec for " << api);
  throw;
}

constexpr const char* kMini = R"(op: mini_op
api: mini
tensors:
  - {name: x, layout: [T], dtypes: [f32]}
  - {name: y, like: x, dtypes: [f32], output: true}
scalars:
SCALARS
axes:
  - {name: dtype, kind: enum, values: [f32]}
backends:
  cpu:
    targets:
      generic: {flags: ["-march=x86-64"]}
    template: mini.cpu.cpp.tmpl
    suffix: .cpp
)";

// Whitespace runs as one space: long generated lines are wrapped.
std::string flat(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n';
    if (space && !out.empty() && out.back() == ' ') continue;
    out += space ? ' ' : c;
  }
  return out;
}

ejk::OpSchema mini(const std::string& scalars) {
  std::string text = kMini;
  text.replace(text.find("SCALARS"), 7, scalars);
  return ejk::OpSchema::parse(text, "specs/mini.yaml");
}

std::string error_of(const std::string& scalars) {
  try {
    mini(scalars);
  } catch (const ejk::SpecError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("every optional scalar of every op has a has_ flag in C and std::optional in C++", "[api]") {
  size_t optional = 0;
  for (const auto& f : specs()) {
    if (f.schema.internal()) continue;
    const std::string c = ejk::gen::render_c_header(f.schema, f.name);
    const std::string cpp = ejk::gen::render_cpp_header(f.schema, f.name);
    for (const ejk::ScalarArgDef& d : f.schema.scalars()) {
      INFO(f.schema.api() << "." << d.name);
      if (d.default_is_absent()) {
        ++optional;
        CHECK_THAT(c, ContainsSubstring("int32_t has_" + d.name + ";"));
        CHECK_THAT(cpp, ContainsSubstring("> " + d.name + ";"));  // std::optional<T> name;
      } else {
        CHECK_THAT(c, !ContainsSubstring("has_" + d.name));
        CHECK_THAT(cpp, ContainsSubstring(" " + d.name + " = " + d.default_value + ";"));
      }
    }
  }
  CHECK(optional >= 6);  // flash's five and mean_pooling_backward's num_tokens
}

TEST_CASE("the C header: versioned options, an _init, tensors by pointer in spec order", "[api]") {
  const auto& f = spec_of("flash_attention");
  const std::string c = flat(ejk::gen::render_c_header(f.schema, f.name));
  CHECK_THAT(c, ContainsSubstring("typedef struct { uint32_t struct_size; "));
  CHECK_THAT(c, ContainsSubstring("} ejk_flash_attention_options;"));
  CHECK_THAT(c, ContainsSubstring("EJK_API void ejk_flash_attention_options_init(ejk_flash_attention_options* opt);"));
  CHECK_THAT(c, ContainsSubstring("int64_t sliding_window_left, sliding_window_right;"));
  CHECK_THAT(c, ContainsSubstring("int64_t block_q; /* 0: the heuristic */"));
  CHECK_THAT(c, ContainsSubstring(
                    "EJK_API int ejk_flash_attention(const ejk_context* ctx, const ejk_tensor* q, const ejk_tensor* k, "
                    "const ejk_tensor* v, const ejk_tensor* bias, const ejk_tensor* q_segment_ids, const ejk_tensor* "
                    "kv_segment_ids, const ejk_tensor* cum_seqlens_q, const ejk_tensor* cum_seqlens_k, const "
                    "ejk_tensor* softmax_aux, const ejk_tensor* attention_mask, const ejk_flash_attention_options* opt, "
                    "const ejk_tensor* out, const "
                    "ejk_tensor* lse);"));
  // An op without scalars or tuning axes has no options struct.
  const auto& m = spec_of("merge_attention_states");
  const std::string mc = flat(ejk::gen::render_c_header(m.schema, m.name));
  CHECK_THAT(mc, !ContainsSubstring("_options"));
  CHECK_THAT(mc, ContainsSubstring("const ejk_tensor* lse_b, const ejk_tensor* out, const ejk_tensor* lse);"));
}

TEST_CASE("the C++ header keeps the names users have", "[api]") {
  const auto& f = spec_of("flash_attention");
  const std::string h = flat(ejk::gen::render_cpp_header(f.schema, f.name));
  for (const char* s : {"struct FlashAttentionInputs {", " TensorView q;", " std::optional<TensorView> bias;",
                        "struct FlashAttentionOptions {", " std::optional<float> softmax_scale;",
                        " bool causal = false;", " std::optional<SlidingWindow> sliding_window;",
                        " int64_t block_q = 0;", "struct FlashAttentionResult {",
                        "EJK_API FlashAttentionResult flash_attention(const FlashAttentionInputs& in, const "
                        "FlashAttentionOptions& opt = {}, const Context& ctx = {});",
                        "EJK_API RunInfo flash_attention_into(const FlashAttentionInputs& in, const "
                        "FlashAttentionOptions& opt, const TensorView& out, const TensorView& lse, const Context& "
                        "ctx = {});",
                        "EJK_API FlashAttentionReference flash_attention_reference("})
    CHECK_THAT(h, ContainsSubstring(s));
  const std::string types = ejk::gen::render_types_header(specs());
  CHECK_THAT(types, ContainsSubstring("struct SlidingWindow {\n  int64_t left = 0, right = 0;\n};"));
}

TEST_CASE("the implementation packs by spec index and binds once in the allocating form", "[api]") {
  for (const auto& f : specs()) {
    if (f.schema.internal()) continue;
    INFO(f.schema.api());
    const std::string impl = flat(ejk::gen::render_api_impl(f.schema, f.name));
    const auto& tensors = f.schema.tensors();
    std::string names;
    for (size_t t = 0; t < tensors.size(); ++t) {
      names += (names.empty() ? "\"" : ", \"") + tensors[t].name + "\"";
      const std::string ref = tensors[t].output ? "&" + tensors[t].name : "&in." + tensors[t].name;
      if (!tensors[t].optional) CHECK_THAT(impl, ContainsSubstring(fmt::format("a.tensors[{}] = {};", t, ref)));
    }
    CHECK_THAT(impl, ContainsSubstring(fmt::format("engine::spec_op(\"{}\", {{{}}}", f.schema.api(), names)));
    // One bind in the allocating form: the outputs are attached to the same Bound.
    const size_t begin = impl.find("Result " + f.schema.api() + "(");
    const size_t end = impl.find("RunInfo " + f.schema.api() + "_into(");
    REQUIRE(begin != std::string::npos);
    const std::string allocating = impl.substr(begin, end - begin);
    CHECK(allocating.find("engine::bind(") != std::string::npos);
    CHECK(allocating.find("engine::bind(", allocating.find("engine::bind(") + 1) == std::string::npos);
    CHECK_THAT(allocating, ContainsSubstring("engine::attach_output(b, a, ") && ContainsSubstring("engine::run_bound(b, ctx)"));
    CHECK_THAT(allocating, !ContainsSubstring("_into("));
    // The C function calls the same implementation.
    CHECK_THAT(impl, ContainsSubstring(f.schema.api() + "_into(in"));
  }
}

TEST_CASE("ejk/ops/c_ops.h lists every public op and no internal one", "[api]") {
  const std::string list = ejk::gen::render_c_list(specs());
  for (const auto& f : specs())
    CHECK((list.find("\"ejk/ops/" + f.schema.api() + "_c.h\"") != std::string::npos) == !f.schema.internal());
}

TEST_CASE("generate writes the APIs with the sources only when asked, and lists them", "[api]") {
  TempDir dir;
  ejk::gen::GenerateOptions o;
  o.specs_dir = ejk::test::source_root() / "specs";
  o.templates_dir = ejk::test::source_root() / "templates";
  o.kernels_dir = ejk::test::source_root() / "kernels";
  o.out_dir = dir.path() / "out";
  o.selection.backends = {"cpu"};
  o.selection.keys = {"mean_pool_fwd.cpu.generic.f32"};
  ejk::gen::generate(o);
  CHECK(!fs::exists(dir.path() / "api"));
  o.api_dir = dir.path() / "api";
  const auto listed = ejk::gen::list_outputs(o);
  ejk::gen::generate(o);
  for (const char* rel : {"include/ejk/ops/flash_attention.h", "include/ejk/ops/flash_attention_c.h",
                          "include/ejk/ops/c_ops.h", "include/ejk/ops/types.h", "src/mean_pooling_api.cpp"}) {
    CHECK(fs::is_regular_file(*o.api_dir / rel));
    CHECK(std::find(listed.begin(), listed.end(), *o.api_dir / rel) != listed.end());
  }
  CHECK(!fs::exists(*o.api_dir / "include/ejk/ops/flash_fwd_bias_rows.h"));  // internal: no API
  CHECK_THAT(ejk::gen::cmake_manifest(o), ContainsSubstring("set(EJK_GEN_API_SOURCES \"") &&
                                              ContainsSubstring("flash_attention_api.cpp"));
  o.only = ejk::gen::Only::registry;  // the CUDA build's second run: no APIs
  CHECK(ejk::gen::list_outputs(o).size() == 1);
}

TEST_CASE("scalar ranges and pair structs in the spec", "[api][schema]") {
  const ejk::OpSchema s = mini(
      "  - {name: scale, type: f32, default: \"1/sqrt(T)\", finite: true}\n"
      "  - {name: cap, type: f32, default: none, positive: true, max: 100}\n"
      "  - {name: n, type: i64, default: \"4\", min: 1}\n"
      "  - {name: w, type: \"i64[2]\", default: none, min: 0, struct: Pair, fields: [lo, hi]}\n"
      "  - {name: on, type: bool, default: \"true\"}");
  const auto& sc = s.scalars();
  CHECK((sc[0].finite && sc[0].default_is_absent()));
  CHECK((sc[1].positive && sc[1].has_max && sc[1].max == 100 && !sc[1].has_min));
  CHECK((sc[2].has_min && sc[2].min == 1 && !sc[2].default_is_absent()));
  CHECK((sc[3].pair_struct == "Pair" && sc[3].pair_fields == std::vector<std::string>{"lo", "hi"}));
  CHECK(!sc[4].default_is_absent());
  CHECK_THAT(error_of("  - {name: on, type: bool, default: \"true\", min: 0}"), ContainsSubstring("a bool has no range"));
  CHECK_THAT(error_of("  - {name: n, type: i64, default: none, finite: true}"),
             ContainsSubstring("only f32 and f64 scalars can be non-finite"));
  CHECK_THAT(error_of("  - {name: n, type: i64, default: none, min: 0.5}"), ContainsSubstring("integer bound"));
  CHECK_THAT(error_of("  - {name: n, type: f32, default: none, min: 2, max: 1}"), ContainsSubstring("above max"));
  CHECK_THAT(error_of("  - {name: n, type: f32, default: none, min: abc}"), ContainsSubstring("expected a finite number"));
  CHECK_THAT(error_of("  - {name: w, type: \"i64[2]\", default: none, struct: Pair}"),
             ContainsSubstring("struct and fields go together"));
  CHECK_THAT(error_of("  - {name: w, type: \"i64[2]\", default: none, struct: pair, fields: [a, b]}"),
             ContainsSubstring("CamelCase"));
  CHECK_THAT(error_of("  - {name: w, type: \"i64[2]\", default: none, struct: Pair, fields: [a, a]}"),
             ContainsSubstring("two distinct field names"));
}

TEST_CASE("specs name the targets of specs/targets.yaml, declared once", "[api][targets]") {
  const auto table_path = ejk::test::source_root() / "specs" / "targets.yaml";
  const ejk::TargetTable table = ejk::TargetTable::parse(ejk::gen::read_file(table_path), table_path.string());
  REQUIRE(table.backends.count("cpu") == 1);
  REQUIRE(table.backends.count("cuda") == 1);
  const ejk::BackendDef& cpu = spec_of("flash_attention").schema.backend("cpu");
  std::vector<std::string> names;
  for (const ejk::TargetDef& t : cpu.targets) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"amx", "avx512", "avx2", "generic"});
  CHECK(cpu.find_target("avx2")->compile_flags == std::vector<std::string>{"-march=x86-64-v3"});
  const ejk::BackendDef& cuda = spec_of("mean_pooling").schema.backend("cuda");
  CHECK(cuda.find_target("sm90a")->vars.at("sm") == 90);
  CHECK(cuda.find_target("sm80")->requires_features == std::vector<std::string>{"sm_80"});

  std::string text = kMini;
  text.replace(text.find("SCALARS"), 7, "  - {name: on, type: bool, default: \"true\"}");
  text.replace(text.find("targets:\n      generic: {flags: [\"-march=x86-64\"]}"), 50, "targets: [avx2, generic]");
  const ejk::OpSchema named = ejk::OpSchema::parse(text, "specs/mini.yaml", &table);
  CHECK(named.backend("cpu").targets.size() == 2);
  CHECK(named.backend("cpu").targets.front().name == "avx2");
  CHECK_THROWS_WITH(ejk::OpSchema::parse(text, "specs/mini.yaml"), ContainsSubstring("no target table was given"));
  std::string unknown = text;
  unknown.replace(unknown.find("avx2, generic"), 13, "avx3, generic");
  CHECK_THROWS_WITH(ejk::OpSchema::parse(unknown, "specs/mini.yaml", &table),
                    ContainsSubstring("specs/mini.yaml:") && ContainsSubstring("'avx3' is not a cpu target"));
  std::string twice = text;
  twice.replace(twice.find("avx2, generic"), 13, "avx2, avx2");
  CHECK_THROWS_WITH(ejk::OpSchema::parse(twice, "specs/mini.yaml", &table), ContainsSubstring("listed twice"));
  CHECK_THROWS_WITH(ejk::TargetTable::parse("targets:\n  cpu: [avx2]\n", "specs/targets.yaml"),
                    ContainsSubstring("expected a map of targets"));
}
