#include "api.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "ejk/core/error.h"
#include "version.h"

namespace ejk::gen {
namespace {

bool is_enum_axis(const OpSchema& s, const std::string& name) {
  return std::any_of(s.axes().begin(), s.axes().end(),
                     [&](const AxisDef& a) { return a.name == name && a.kind == AxisKind::Enum; });
}

// Int axes no argument sets (block sizes): the caller may fix them, 0 leaves them to the heuristic.
std::vector<int> tuning_axes(const OpSchema& s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.axes().size(); ++i)
    if (s.axes()[i].kind == AxisKind::Int && s.axes()[i].from.empty()) out.push_back(int(i));
  return out;
}

bool has_options(const OpSchema& s) { return !s.scalars().empty() || !tuning_axes(s).empty(); }

std::vector<int> tensors_where(const OpSchema& s, bool outputs) {
  std::vector<int> out;
  for (size_t t = 0; t < s.tensors().size(); ++t)
    if (s.tensors()[t].output == outputs) out.push_back(int(t));
  return out;
}

std::string one_line(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    out += c;
    space = false;
  }
  return out;
}

// `text` as comment lines of at most ~100 columns, each starting with `lead` ("  // ").
std::string comment(std::string_view text, const std::string& lead) {
  const std::string flat = one_line(text);
  if (flat.empty()) return "";
  std::string out, line;
  size_t start = 0;
  while (start < flat.size()) {
    size_t end = flat.find(' ', start);
    if (end == std::string::npos) end = flat.size();
    const std::string word = flat.substr(start, end - start);
    if (!line.empty() && lead.size() + line.size() + 1 + word.size() > 100) {
      out += lead + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + lead + line + "\n";
}

std::string c_comment(std::string_view text, const std::string& indent) {
  const std::string flat = one_line(text);
  if (!flat.empty() && indent.size() + flat.size() + 6 <= 100) return indent + "/* " + flat + " */\n";
  std::string body = comment(text, indent + " * ");
  return body.empty() ? "" : indent + "/*\n" + body + indent + " */\n";
}

// Code lines past 100 columns broken after a comma outside strings and template brackets, the
// rest indented by 4 more than the line: generated headers are read by people.
std::string wrap_line(const std::string& line) {
  const size_t lead = line.find_first_not_of(' ');
  if (line.size() <= 100 || lead == std::string::npos || line.compare(lead, 2, "//") == 0 ||
      line.compare(lead, 1, "*") == 0 || line.compare(lead, 2, "/*") == 0)
    return line + "\n";
  std::string out, cur;
  const std::string indent(lead + 4, ' ');
  bool quoted = false;
  int angle = 0;
  size_t last_break = std::string::npos;  // in cur: just after a breakable ", "
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    cur += c;
    if (c == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && c == '<') ++angle;
    if (!quoted && c == '>' && angle > 0) --angle;
    if (!quoted && angle == 0 && c == ',' && i + 1 < line.size() && line[i + 1] == ' ') last_break = cur.size();
    if (cur.size() > 100 && last_break != std::string::npos) {
      out += cur.substr(0, last_break) + "\n";
      std::string rest = cur.substr(last_break);
      rest.erase(0, rest.find_first_not_of(' '));
      cur = indent + rest;
      last_break = std::string::npos;
    }
  }
  return out + cur + "\n";
}

std::string wrap_lines(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    out += wrap_line(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::string cpp_scalar_type(const ScalarArgDef& d) {
  switch (d.type) {
    case ScalarType::f32: return "float";
    case ScalarType::f64: return "double";
    case ScalarType::i64: return "int64_t";
    case ScalarType::boolean: return "bool";
    case ScalarType::i64x2: return d.pair_struct.empty() ? "std::array<int64_t, 2>" : d.pair_struct;
  }
  return "";
}

std::string c_scalar_type(const ScalarArgDef& d) {
  switch (d.type) {
    case ScalarType::f32: return "float";
    case ScalarType::f64: return "double";
    case ScalarType::i64: return "int64_t";
    case ScalarType::boolean: return "int32_t";
    case ScalarType::i64x2: return "int64_t";
  }
  return "";
}

// The two C fields of a pair: <name>_<field>, or <name>[0] and [1].
std::pair<std::string, std::string> c_pair_fields(const ScalarArgDef& d) {
  if (d.pair_fields.size() == 2) return {d.name + "_" + d.pair_fields[0], d.name + "_" + d.pair_fields[1]};
  return {d.name + "[0]", d.name + "[1]"};
}

// The Scalar the engine takes for a C++ value `v` of the scalar's type.
std::string to_scalar(const ScalarArgDef& d, const std::string& v) {
  switch (d.type) {
    case ScalarType::f32:
    case ScalarType::f64: return fmt::format("double({})", v);
    case ScalarType::i64: return fmt::format("int64_t({})", v);
    case ScalarType::boolean: return fmt::format("bool({})", v);
    case ScalarType::i64x2:
      if (d.pair_fields.size() != 2) return v;
      return fmt::format("std::array<int64_t, 2>{{{0}.{1}, {0}.{2}}}", v, d.pair_fields[0], d.pair_fields[1]);
  }
  return v;
}

std::string tensor_doc(const TensorArgDef& t) {
  std::string layout = t.like.empty() ? t.layout.text : "like " + t.like;
  for (const auto& [mode, l] : t.mode_layouts) layout += fmt::format("; {}: {}", mode, l.text);
  std::string dtypes;
  for (const std::string& d : t.dtypes) dtypes += (dtypes.empty() ? "" : "|") + d;
  return fmt::format("{} {}. {}", layout, dtypes, t.doc);
}

std::string scalar_doc(const ScalarArgDef& d) {
  std::string range;
  if (d.has_min) range += fmt::format(", >= {}", d.min);
  if (d.has_max) range += fmt::format(", <= {}", d.max);
  if (d.positive) range += ", > 0";
  if (d.finite) range += ", finite";
  return fmt::format("{}, default {}{}. {}", d.type_name, d.default_value, range, d.doc);
}

std::string banner(const std::string& spec_name, std::string_view what, bool c_style) {
  const std::string text = fmt::format("Generated by ejk-gen {} from specs/{}: {}. Do not edit.", kVersion,
                                       spec_name, what);
  return c_style ? "/* " + text + " */\n" : "// " + text + "\n";
}

struct Names {
  std::string api, camel, inputs, options, result, reference, c_options;
  explicit Names(const OpSchema& s)
      : api(s.api()), camel(camel_case(s.api())), inputs(camel + "Inputs"), options(camel + "Options"),
        result(camel + "Result"), reference(camel + "Reference"), c_options("ejk_" + s.api() + "_options") {}
};

// "const XInputs& in, const XOptions& opt" (defaults: "= {}" on the options).
std::string in_params(const OpSchema& s, const Names& n, bool default_options) {
  std::string p = fmt::format("const {}& in", n.inputs);
  if (has_options(s)) p += fmt::format(", const {}& opt{}", n.options, default_options ? " = {}" : "");
  return p;
}

std::string output_params(const OpSchema& s) {
  std::string p;
  for (int t : tensors_where(s, true)) {
    const TensorArgDef& d = s.tensors()[t];
    p += d.optional ? fmt::format(", const std::optional<TensorView>& {}", d.name)
                    : fmt::format(", const TensorView& {}", d.name);
  }
  return p;
}

void cpp_inputs_struct(const OpSchema& s, const Names& n, std::string& o) {
  o += fmt::format("struct {} {{\n", n.inputs);
  for (int t : tensors_where(s, false)) {
    const TensorArgDef& d = s.tensors()[t];
    o += comment(tensor_doc(d), "  // ");
    o += d.optional ? fmt::format("  std::optional<TensorView> {};\n", d.name) : fmt::format("  TensorView {};\n", d.name);
  }
  o += "};\n\n";
}

void cpp_options_struct(const OpSchema& s, const Names& n, std::string& o) {
  if (!has_options(s)) return;
  o += fmt::format("struct {} {{\n", n.options);
  for (const ScalarArgDef& d : s.scalars()) {
    o += comment(scalar_doc(d), "  // ");
    if (d.default_is_absent()) o += fmt::format("  std::optional<{}> {};\n", cpp_scalar_type(d), d.name);
    else o += fmt::format("  {} {} = {};\n", cpp_scalar_type(d), d.name, d.default_value);
  }
  for (int a : tuning_axes(s)) {
    const AxisDef& x = s.axes()[a];
    o += comment(fmt::format("0: the spec's heuristic. {}", x.doc), "  // ");
    o += fmt::format("  int64_t {} = 0;\n", x.name);
  }
  o += "};\n\n";
}

}  // namespace

std::string camel_case(std::string_view snake) {
  std::string out;
  bool up = true;
  for (char c : snake) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

std::string render_cpp_header(const OpSchema& s, const std::string& spec_name) {
  const Names n(s);
  std::string o = banner(spec_name, fmt::format("the typed C++ API of {}", n.api), false);
  o += "//\n" + comment(s.doc(), "// ");
  o += "#pragma once\n#include <array>\n#include <cstdint>\n#include <optional>\n#include <vector>\n\n";
  o += "#include \"ejk/export.h\"\n#include \"ejk/ops/types.h\"\n#include \"ejk/tensor.h\"\n#include \"ejk/types.h\"\n\n";
  o += "namespace ejk {\n\n";
  cpp_inputs_struct(s, n, o);
  cpp_options_struct(s, n, o);
  o += fmt::format("struct {} {{\n", n.result);
  for (int t : tensors_where(s, true)) o += fmt::format("  Tensor {};\n", s.tensors()[t].name);
  o += "  RunInfo info;\n};\n\n";
  o += "// Allocates the outputs on the inputs' device. Asynchronous on CUDA (ctx.stream).\n";
  o += fmt::format("EJK_API {} {}({}, const Context& ctx = {{}});\n\n", n.result, n.api, in_params(s, n, true));
  o += "// Writes into the caller's outputs (shapes and dtypes validated against the spec).\n";
  o += fmt::format("EJK_API RunInfo {}_into({}{}, const Context& ctx = {{}});\n\n", n.api, in_params(s, n, false),
                   output_params(s));
  o += "// The float64 reference on CPU tensors: each output contiguous in its shape.\n";
  o += fmt::format("struct {} {{\n", n.reference);
  for (int t : tensors_where(s, true)) o += fmt::format("  std::vector<double> {};\n", s.tensors()[t].name);
  o += "};\n";
  o += fmt::format("EJK_API {} {}_reference({});\n\n", n.reference, n.api, in_params(s, n, true));
  o += "}  // namespace ejk\n";
  return wrap_lines(o);
}

std::string render_c_header(const OpSchema& s, const std::string& spec_name) {
  const Names n(s);
  std::string guard = "EJK_OPS_" + n.api + "_C_H";
  std::transform(guard.begin(), guard.end(), guard.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  std::string o = banner(spec_name, fmt::format("the C function of {}", n.api), true);
  o += c_comment(s.doc(), "");
  o += fmt::format("#ifndef {0}\n#define {0}\n#include \"ejk/ejk.h\"\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n", guard);
  if (has_options(s)) {
    o += "/* struct_size first (the _init function sets it); has_<x>: x is given. */\n";
    o += "typedef struct {\n  uint32_t struct_size;\n";
    for (const ScalarArgDef& d : s.scalars()) {
      o += c_comment(scalar_doc(d), "  ");
      if (d.default_is_absent()) o += fmt::format("  int32_t has_{};\n", d.name);
      if (d.type == ScalarType::i64x2 && d.pair_fields.size() == 2) {
        const auto [a, b] = c_pair_fields(d);
        o += fmt::format("  int64_t {}, {};\n", a, b);
      } else if (d.type == ScalarType::i64x2) {
        o += fmt::format("  int64_t {}[2];\n", d.name);
      } else {
        o += fmt::format("  {} {};\n", c_scalar_type(d), d.name);
      }
    }
    for (int a : tuning_axes(s)) o += fmt::format("  int64_t {}; /* 0: the heuristic */\n", s.axes()[a].name);
    o += fmt::format("}} {};\n", n.c_options);
    o += fmt::format("EJK_API void {0}_init({0}* opt);\n\n", n.c_options);
  }
  o += "/* Tensors in the spec's order, inputs, then the options (NULL: defaults), then outputs;\n"
       " * NULL for an absent optional tensor. ctx may be NULL (defaults). */\n";
  o += fmt::format("EJK_API int ejk_{}(const ejk_context* ctx", n.api);
  for (int t : tensors_where(s, false)) o += fmt::format(", const ejk_tensor* {}", s.tensors()[t].name);
  if (has_options(s)) o += fmt::format(", const {}* opt", n.c_options);
  for (int t : tensors_where(s, true)) o += fmt::format(", const ejk_tensor* {}", s.tensors()[t].name);
  o += ");\n\n#ifdef __cplusplus\n}\n#endif\n#endif\n";
  return wrap_lines(o);
}

namespace {

void impl_spec_op(const OpSchema& s, std::string& o) {
  std::string tensors, scalars, tuning;
  for (const TensorArgDef& t : s.tensors()) tensors += fmt::format("{}\"{}\"", tensors.empty() ? "" : ", ", t.name);
  for (const ScalarArgDef& d : s.scalars()) scalars += fmt::format("{}\"{}\"", scalars.empty() ? "" : ", ", d.name);
  for (int a : tuning_axes(s)) tuning += fmt::format("{}{{{}, \"{}\"}}", tuning.empty() ? "" : ", ", a, s.axes()[a].name);
  o += "// The op, found once; the indices below are the spec's, checked against it here.\n";
  o += "const engine::OpDef& the_op() {\n";
  o += fmt::format("  static const engine::OpDef& op = engine::spec_op(\"{}\", {{{}}}, {{{}}}, {{{}}});\n", s.api(),
                   tensors, scalars, tuning);
  o += "  return op;\n}\n\n";
}

void impl_pack(const OpSchema& s, const Names& n, std::string& o) {
  o += fmt::format("engine::ArgPack pack({}) {{\n  engine::ArgPack a;\n", in_params(s, n, false));
  for (int t : tensors_where(s, false)) {
    const TensorArgDef& d = s.tensors()[t];
    o += d.optional ? fmt::format("  a.tensors[{0}] = in.{1} ? &*in.{1} : nullptr;\n", t, d.name)
                    : fmt::format("  a.tensors[{}] = &in.{};\n", t, d.name);
  }
  for (size_t i = 0; i < s.scalars().size(); ++i) {
    const ScalarArgDef& d = s.scalars()[i];
    if (d.default_is_absent())
      o += fmt::format("  if (opt.{0}) a.scalars[{1}] = {2};\n", d.name, i,
                       to_scalar(d, d.type == ScalarType::i64x2 ? "(*opt." + d.name + ")" : "*opt." + d.name));
    else
      o += fmt::format("  a.scalars[{}] = {};\n", i, to_scalar(d, "opt." + d.name));
  }
  for (int a : tuning_axes(s)) {
    const std::string& x = s.axes()[a].name;
    o += fmt::format("  if (opt.{0} < 0)\n    throw InvalidArgument(fmt::format(\"{1}: {0}: must be >= 0 (0: the "
                     "heuristic), got {{}}\", opt.{0}));\n",
                     x, s.api());
    o += fmt::format("  a.tuning[{}] = opt.{};\n", a, x);
  }
  o += "  return a;\n}\n\n";
}

std::string pack_call(const OpSchema& s) { return has_options(s) ? "pack(in, opt)" : "pack(in)"; }

std::string output_dtype(const OpSchema& s, const TensorArgDef& d) {
  const std::string& first = d.dtypes.front();
  return is_enum_axis(s, first) ? "b.dtype" : fmt::format("DType::{}", first);
}

void impl_cpp_forms(const OpSchema& s, const Names& n, std::string& o) {
  const std::vector<int> outs = tensors_where(s, true);
  // Allocating form: bind once, allocate from the bound sizes, run the same Bound.
  o += fmt::format("{} {}({}, const Context& ctx) {{\n", n.result, n.api, in_params(s, n, false));
  o += fmt::format("  const engine::OpDef& op = the_op();\n  engine::ArgPack a = {};\n", pack_call(s));
  o += "  a.outputs_optional = true;\n  engine::Bound b = engine::bind(op, a);\n  op.check(b);\n";
  o += fmt::format("  {} r;\n", n.result);
  for (int t : outs) {
    const TensorArgDef& d = s.tensors()[t];
    o += fmt::format("  r.{} = Tensor::empty(engine::output_shape(b, {}), {}, b.device);\n", d.name, t, output_dtype(s, d));
    o += fmt::format("  engine::attach_output(b, a, {}, r.{}.view());\n", t, d.name);
  }
  o += "  r.info = engine::run_bound(b, ctx);\n  return r;\n}\n\n";

  o += fmt::format("RunInfo {}_into({}{}, const Context& ctx) {{\n", n.api, in_params(s, n, false), output_params(s));
  o += fmt::format("  engine::ArgPack a = {};\n", pack_call(s));
  for (int t : outs) {
    const TensorArgDef& d = s.tensors()[t];
    o += d.optional ? fmt::format("  a.tensors[{0}] = {1} ? &*{1} : nullptr;\n", t, d.name)
                    : fmt::format("  a.tensors[{}] = &{};\n", t, d.name);
  }
  o += "  return engine::call(the_op(), a, ctx);\n}\n\n";

  o += fmt::format("{} {}_reference({}) {{\n", n.reference, n.api, in_params(s, n, false));
  o += fmt::format("  {} r;\n", n.reference);
  o += fmt::format("  for (ReferenceOutput& o : reference(\"{}\", engine::args_of(the_op(), {}))) {{\n", s.api(), pack_call(s));
  for (int t : outs)
    o += fmt::format("    if (o.name == \"{0}\") r.{0} = std::move(o.values);\n", s.tensors()[t].name);
  o += "  }\n  return r;\n}\n\n";
}

void impl_c_options(const OpSchema& s, const Names& n, std::string& o) {
  o += fmt::format("extern \"C\" void {0}_init({0}* opt) {{\n", n.c_options);
  o += "  std::memset(opt, 0, sizeof(*opt));  // padding too: unknown bytes must read as zero\n";
  o += "  opt->struct_size = sizeof(*opt);\n";
  for (const ScalarArgDef& d : s.scalars()) {
    if (d.default_is_absent()) continue;
    if (d.type == ScalarType::boolean) o += fmt::format("  opt->{} = {};\n", d.name, d.default_value == "true" ? 1 : 0);
    else o += fmt::format("  opt->{} = {};\n", d.name, d.default_value);
  }
  o += "}\n\n";
}

// The C options struct into the C++ one.
void impl_c_to_cpp_options(const OpSchema& s, const Names& n, std::string& o) {
  o += fmt::format("    {} o;\n    {}_init(&o);\n", n.c_options, n.c_options);
  o += fmt::format("    if (opt) capi::read_versioned(opt, &o, sizeof(o), \"{}\");\n", n.c_options);
  o += fmt::format("    {} cpp;\n", n.options);
  for (const ScalarArgDef& d : s.scalars()) {
    std::string value = fmt::format("o.{}", d.name);
    if (d.type == ScalarType::boolean) value = fmt::format("o.{} != 0", d.name);
    if (d.type == ScalarType::i64x2) {
      const auto [a, b] = c_pair_fields(d);
      value = fmt::format("{}{{o.{}, o.{}}}", cpp_scalar_type(d), a, b);
    }
    if (d.default_is_absent()) o += fmt::format("    if (o.has_{}) cpp.{} = {};\n", d.name, d.name, value);
    else o += fmt::format("    cpp.{} = {};\n", d.name, value);
  }
  for (int a : tuning_axes(s)) o += fmt::format("    cpp.{0} = o.{0};\n", s.axes()[a].name);
}

void impl_c_function(const OpSchema& s, const Names& n, std::string& o) {
  o += fmt::format("extern \"C\" int ejk_{}(const ejk_context* ctx", n.api);
  for (int t : tensors_where(s, false)) o += fmt::format(", const ejk_tensor* {}", s.tensors()[t].name);
  if (has_options(s)) o += fmt::format(", const {}* opt", n.c_options);
  for (int t : tensors_where(s, true)) o += fmt::format(", const ejk_tensor* {}", s.tensors()[t].name);
  o += ") {\n  return capi::guarded([&] {\n";
  o += fmt::format("    {} in;\n", n.inputs);
  for (int t : tensors_where(s, false)) {
    const TensorArgDef& d = s.tensors()[t];
    if (d.optional) {
      o += fmt::format("    if ({0}) in.{0} = capi::to_view(*{0}, \"{0}\");\n", d.name);
    } else {
      o += fmt::format("    if (!{0}) throw InvalidArgument(\"ejk_{1}: {0}: required, got NULL\");\n", d.name, n.api);
      o += fmt::format("    in.{0} = capi::to_view(*{0}, \"{0}\");\n", d.name);
    }
  }
  std::string outs;
  for (int t : tensors_where(s, true)) {
    const TensorArgDef& d = s.tensors()[t];
    if (d.optional) {
      o += fmt::format("    std::optional<TensorView> {0}_view;\n    if ({0}) {0}_view = capi::to_view(*{0}, \"{0}\");\n",
                       d.name);
    } else {
      o += fmt::format("    if (!{0}) throw InvalidArgument(\"ejk_{1}: {0}: required (an output to write), got NULL\");\n",
                       d.name, n.api);
      o += fmt::format("    const TensorView {0}_view = capi::to_view(*{0}, \"{0}\");\n", d.name);
    }
    outs += fmt::format(", {}_view", d.name);
  }
  if (has_options(s)) impl_c_to_cpp_options(s, n, o);
  o += "    CpuExecutor executor;\n";
  o += fmt::format("    {}_into(in{}{}, capi::to_context(ctx, executor));\n", n.api, has_options(s) ? ", cpp" : "", outs);
  o += "  });\n}\n";
}

}  // namespace

std::string render_api_impl(const OpSchema& s, const std::string& spec_name) {
  const Names n(s);
  std::string o = banner(spec_name, fmt::format("the typed C++ and C API of {} over the engine", n.api), false);
  o += fmt::format("#include \"ejk/ops/{0}.h\"\n#include \"ejk/ops/{0}_c.h\"\n\n", n.api);
  o += "#include <fmt/format.h>\n\n#include <cstring>\n#include <utility>\n\n";
  o += "#include \"api/c_support.h\"\n#include \"ejk/core/error.h\"\n#include \"engine/bind.h\"\n#include \"engine/call.h\"\n\n";
  o += "namespace ejk {\nnamespace {\n\n";
  impl_spec_op(s, o);
  impl_pack(s, n, o);
  o += "}  // namespace\n\n";
  impl_cpp_forms(s, n, o);
  o += "}  // namespace ejk\n\nusing namespace ejk;\n\n";
  if (has_options(s)) impl_c_options(s, n, o);
  impl_c_function(s, n, o);
  return wrap_lines(o);
}

std::string render_c_list(const std::vector<SpecFile>& specs) {
  std::string o = "/* Generated by ejk-gen " + std::string(kVersion) +
                  " from the specs: the C header of every public op, included by ejk/ejk.h. Do not edit. */\n";
  o += "#ifndef EJK_OPS_C_OPS_H\n#define EJK_OPS_C_OPS_H\n";
  for (const SpecFile& f : specs)
    if (!f.schema.internal()) o += fmt::format("#include \"ejk/ops/{}_c.h\"\n", f.schema.api());
  return o + "#endif\n";
}

std::string render_types_header(const std::vector<SpecFile>& specs) {
  std::map<std::string, std::pair<std::vector<std::string>, std::string>> structs;  // name -> (fields, spec)
  for (const SpecFile& f : specs)
    for (const ScalarArgDef& d : f.schema.scalars()) {
      if (d.pair_struct.empty()) continue;
      auto [it, fresh] = structs.emplace(d.pair_struct, std::make_pair(d.pair_fields, f.name));
      if (!fresh && it->second.first != d.pair_fields)
        throw SpecError(fmt::format("{}:{}: scalars.{}.struct: '{}' has other fields in {}", f.schema.file(), d.line,
                                    d.name, d.pair_struct, it->second.second));
    }
  std::string o = "// Generated by ejk-gen " + std::string(kVersion) +
                  " from specs/*.yaml: the pair types of the ops' scalars. Do not edit.\n";
  o += "#pragma once\n#include <cstdint>\n\nnamespace ejk {\n";
  for (const auto& [name, v] : structs)
    o += fmt::format("\nstruct {} {{\n  int64_t {} = 0, {} = 0;\n}};\n", name, v.first[0], v.first[1]);
  return o + "\n}  // namespace ejk\n";
}

std::vector<ApiFile> render_api(const std::vector<SpecFile>& specs) {
  std::vector<ApiFile> out;
  for (const SpecFile& f : specs) {
    if (f.schema.internal()) continue;
    const std::string& api = f.schema.api();
    out.push_back({fs::path("include/ejk/ops") / (api + ".h"), render_cpp_header(f.schema, f.name)});
    out.push_back({fs::path("include/ejk/ops") / (api + "_c.h"), render_c_header(f.schema, f.name)});
    out.push_back({fs::path("src") / (api + "_api.cpp"), render_api_impl(f.schema, f.name)});
  }
  out.push_back({"include/ejk/ops/c_ops.h", render_c_list(specs)});
  out.push_back({"include/ejk/ops/types.h", render_types_header(specs)});
  return out;
}

}  // namespace ejk::gen
