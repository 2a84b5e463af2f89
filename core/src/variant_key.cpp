#include "ejk/core/variant_key.h"

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk {

const AxisValue& VariantKey::axis(std::string_view name) const {
  for (const auto& a : axes)
    if (a.name == name) return a;
  throw InvalidArgument(fmt::format("variant key {}.{}: no axis named '{}'", op, backend, name));
}

AxisValue& VariantKey::axis_mut(std::string_view name) {
  return const_cast<AxisValue&>(static_cast<const VariantKey&>(*this).axis(name));
}

static const AxisValue& expect_kind(const AxisValue& a, AxisKind kind, const char* what) {
  if (a.kind != kind) throw InvalidArgument(fmt::format("axis '{}' is not {}", a.name, what));
  return a;
}

int64_t VariantKey::get_int(std::string_view n) const {
  return expect_kind(axis(n), AxisKind::Int, "an int axis").int_value;
}
const std::string& VariantKey::get_enum(std::string_view n) const {
  return expect_kind(axis(n), AxisKind::Enum, "an enum axis").enum_value;
}
bool VariantKey::get_flag(std::string_view n) const {
  return expect_kind(axis(n), AxisKind::Flag, "a flag axis").flag_value;
}
void VariantKey::set_int(std::string_view n, int64_t v) {
  expect_kind(axis(n), AxisKind::Int, "an int axis");
  axis_mut(n).int_value = v;
}
void VariantKey::set_enum(std::string_view n, std::string v) {
  expect_kind(axis(n), AxisKind::Enum, "an enum axis");
  axis_mut(n).enum_value = std::move(v);
}
void VariantKey::set_flag(std::string_view n, bool v) {
  expect_kind(axis(n), AxisKind::Flag, "a flag axis");
  axis_mut(n).flag_value = v;
}

std::string VariantKey::to_string_cached() const { return to_string(*this); }

std::string to_string(const VariantKey& key) {
  std::string s = fmt::format("{}.{}.{}", key.op, key.backend, key.target);
  for (const auto& a : key.axes) {
    switch (a.kind) {
      case AxisKind::Int: s += fmt::format(".{}{}", a.token, a.int_value); break;
      case AxisKind::Enum: s += "." + a.enum_value; break;
      case AxisKind::Flag:
        if (a.flag_value) s += "." + a.token;
        break;
    }
  }
  return s;
}

std::string symbol_name(const VariantKey& key) {
  std::string s = "ejk_" + to_string(key);
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

}  // namespace ejk
