#include "spec_reader.h"

#include <yaml-cpp/depthguard.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "ejk/core/error.h"

namespace ejk::detail {
namespace {

const char* type_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an undefined node";
  }
}

std::string join_names(std::initializer_list<std::string_view> names) {
  std::string s;
  for (std::string_view n : names) s += fmt::format("{}{}", s.empty() ? "" : ", ", n);
  return s;
}

}  // namespace

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

const YAML::Node* Fields::find(std::string_view key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

std::string SpecReader::join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string SpecReader::index(std::string_view path, size_t i) {
  return fmt::format("{}[{}]", path, i);
}

void SpecReader::fail(int line, std::string_view path, std::string_view what) const {
  // Line 0 means yaml-cpp had no position (an empty document): point at the first line.
  throw SpecError(fmt::format("{}:{}: {}: {}", file_, std::max(line, 1), path.empty() ? "(document)" : path,
                              what));
}

YAML::Node SpecReader::load(std::string_view text) const {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp bounds its recursive parser itself (so a "[[[[...]]]]" spec cannot overflow the
    // stack) but reports that as "bad file"; say what it means.
    fail(e.mark.line + 1, "yaml", fmt::format("nested too deeply ({} levels of the YAML parser; "
                                              "a spec needs a handful)", e.depth()));
  } catch (const YAML::ParserException& e) {
    fail(e.mark.line + 1, "yaml", fmt::format("syntax error: {}", e.msg));
  }
}

Fields SpecReader::open_fields(const YAML::Node& n, std::string_view path) const {
  if (!n.IsMap()) fail(n, path, fmt::format("expected a map, got {}", type_name(n)));
  Fields f;
  f.line = line(n);
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      fail(it->first, path, fmt::format("expected a name as key, got {}", type_name(it->first)));
    std::string key = it->first.Scalar();
    // yaml-cpp keeps both copies of a repeated key; the second would silently be ignored.
    if (!seen.insert(key).second) fail(it->first, join(path, key), "duplicate key");
    // A key without a value: yaml-cpp places the null node at the next token, so report it
    // here, at the key's own line. No spec key takes an empty value.
    if (it->second.IsNull()) fail(it->first, join(path, key), "has no value");
    f.entries_.emplace_back(std::move(key), it->second);
  }
  return f;
}

Fields SpecReader::fields(const YAML::Node& n, std::string_view path,
                          std::initializer_list<std::string_view> allowed,
                          std::initializer_list<std::string_view> required) const {
  Fields f = open_fields(n, path);
  for (const auto& [key, value] : f.entries()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known)
      fail(value.Mark().line >= 0 ? line(value) : f.line, join(path, key),
           fmt::format("unknown key (expected one of: {})", join_names(allowed)));
  }
  for (std::string_view r : required)
    if (!f.has(r)) fail(f.line, join(path, r), "missing required key");
  return f;
}

std::string SpecReader::text(const YAML::Node& n, std::string_view path) const {
  if (!n.IsScalar()) fail(n, path, fmt::format("expected a string, got {}", type_name(n)));
  return n.Scalar();
}

std::string SpecReader::scalar(const YAML::Node& n, std::string_view path) const {
  std::string s = text(n, path);
  if (s.empty()) fail(n, path, "expected a non-empty string");
  return s;
}

std::string SpecReader::token(const YAML::Node& n, std::string_view path) const {
  std::string s = scalar(n, path);
  if (!is_token(s)) fail(n, path, fmt::format("'{}' is not a token: expected [a-z0-9]+", s));
  return s;
}

std::string SpecReader::identifier(const YAML::Node& n, std::string_view path) const {
  std::string s = scalar(n, path);
  if (!is_identifier(s))
    fail(n, path, fmt::format("'{}' is not a name: expected [a-z_][a-z0-9_]*", s));
  return s;
}

std::string SpecReader::argument_name(const YAML::Node& n, std::string_view path) const {
  // The lower-case keywords of C23, C++20 and Python 3 (names are lower case by the grammar).
  static constexpr std::string_view kKeywords[] = {
      "alignas", "alignof", "and", "and_eq", "as", "asm", "assert", "async", "auto", "await", "bitand", "bitor",
      "bool", "break", "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "co_await", "co_return",
      "co_yield", "compl", "concept", "const", "const_cast", "consteval", "constexpr", "constinit", "continue",
      "decltype", "def", "default", "del", "delete", "do", "double", "dynamic_cast", "elif", "else", "enum",
      "except", "explicit", "export", "extern", "false", "finally", "float", "for", "friend", "from", "global",
      "goto", "if", "import", "in", "inline", "int", "is", "lambda", "long", "mutable", "namespace", "new",
      "noexcept", "nonlocal", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "pass", "private",
      "protected", "public", "raise", "register", "reinterpret_cast", "requires", "restrict", "return", "short",
      "signed", "sizeof", "static", "static_assert", "static_cast", "struct", "switch", "template", "this",
      "thread_local", "throw", "true", "try", "typedef", "typeid", "typename", "typeof", "union", "unsigned",
      "using", "virtual", "void", "volatile", "wchar_t", "while", "with", "xor", "xor_eq", "yield"};
  std::string s = identifier(n, path);
  for (std::string_view k : kKeywords)
    if (s == k)
      fail(n, path, fmt::format("'{}' is a keyword of C, C++ or Python, and argument names are parameters of "
                                "the generated APIs: choose another name", s));
  return s;
}

int64_t SpecReader::integer(const YAML::Node& n, std::string_view path) const {
  const std::string s = scalar(n, path);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    fail(n, path, fmt::format("'{}' is not an integer", s));
  return v;
}

bool SpecReader::boolean(const YAML::Node& n, std::string_view path) const {
  const std::string s = scalar(n, path);
  if (s != "true" && s != "false") fail(n, path, fmt::format("'{}': expected true or false", s));
  return s == "true";
}

std::vector<YAML::Node> SpecReader::list(const YAML::Node& n, std::string_view path,
                                         bool allow_empty) const {
  if (!n.IsSequence()) fail(n, path, fmt::format("expected a list, got {}", type_name(n)));
  std::vector<YAML::Node> out(n.begin(), n.end());
  if (out.empty() && !allow_empty) fail(n, path, "expected a non-empty list");
  return out;
}

std::vector<std::string> SpecReader::scalar_list(const YAML::Node& n, std::string_view path,
                                                 bool allow_empty) const {
  std::vector<std::string> out;
  const std::vector<YAML::Node> items = list(n, path, allow_empty);
  for (size_t i = 0; i < items.size(); ++i) out.push_back(scalar(items[i], index(path, i)));
  return out;
}

}  // namespace ejk::detail
