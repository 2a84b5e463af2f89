// The canonical variant key: one struct, one string form.
//
//   flash_fwd.cpu.avx512.bf16.d128.bq64.bk64.causal.win.seg.cap.sink.bias
//   \_op____/ \backend \target \ axis tokens, in the spec's axis order ___/
//
// to_string() is the only function that spells a key; the same string is the generated file
// name, the cache file name, the test case name and the log tag, and symbol_name() derives
// the kernel symbol from it. Keys are built and parsed against an OpSchema (schema.h), which
// knows the axes; the key itself carries enough to print itself.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ejk {

enum class AxisKind { Int, Enum, Flag };

struct AxisValue {
  std::string name;   // axis name in the spec, e.g. "head_dim"
  AxisKind kind = AxisKind::Int;
  std::string token;  // Int: prefix ("d" -> "d128"); Flag: token when on ("causal"); Enum: unused
  int64_t int_value = 0;
  std::string enum_value;
  bool flag_value = false;
};

struct VariantKey {
  std::string op;       // spec op name, e.g. "flash_fwd"
  std::string backend;  // "cpu", "cuda", "hip"
  std::string target;   // "avx512", "avx2", "generic", "sm80", "sm90a", ...
  std::vector<AxisValue> axes;

  const AxisValue& axis(std::string_view name) const;  // throws InvalidArgument if absent
  int64_t get_int(std::string_view name) const;
  const std::string& get_enum(std::string_view name) const;
  bool get_flag(std::string_view name) const;
  void set_int(std::string_view name, int64_t v);
  void set_enum(std::string_view name, std::string v);
  void set_flag(std::string_view name, bool v);

  bool operator==(const VariantKey& o) const { return to_string_cached() == o.to_string_cached(); }

 private:
  std::string to_string_cached() const;
  AxisValue& axis_mut(std::string_view name);
};

// The canonical string. Tokens are [a-z0-9]+, joined by '.'.
std::string to_string(const VariantKey& key);

// C identifier of the kernel entry point: "ejk_" + to_string() with '.' -> '_'.
std::string symbol_name(const VariantKey& key);

}  // namespace ejk
