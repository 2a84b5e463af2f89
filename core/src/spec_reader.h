// Reading spec YAML with errors that point into the file. Every accessor takes the node's key
// path ("backends.cpu.aot[1].dtype") and throws SpecError "file:line: path: what is wrong",
// with yaml-cpp's 0-based line turned 1-based. Internal to ejk_core.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ejk::detail {

// The entries of one YAML map, checked against the keys it may and must have.
class Fields {
 public:
  const YAML::Node* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<std::pair<std::string, YAML::Node>>& entries() const { return entries_; }
  int line = 0;  // of the map itself, for "missing key" messages

 private:
  friend class SpecReader;
  std::vector<std::pair<std::string, YAML::Node>> entries_;
};

class SpecReader {
 public:
  explicit SpecReader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }
  static int line(const YAML::Node& n) { return n.Mark().line + 1; }
  static std::string join(std::string_view path, std::string_view key);
  static std::string index(std::string_view path, size_t i);

  [[noreturn]] void fail(int line, std::string_view path, std::string_view what) const;
  [[noreturn]] void fail(const YAML::Node& n, std::string_view path, std::string_view what) const {
    fail(line(n), path, what);
  }

  // Parses the whole document; a YAML syntax error names the line where the parser stopped.
  YAML::Node load(std::string_view text) const;

  // A map with only `allowed` keys, all of `required` among them, no key twice.
  Fields fields(const YAML::Node& n, std::string_view path,
                std::initializer_list<std::string_view> allowed,
                std::initializer_list<std::string_view> required) const;
  // A map with any keys (each an identifier), no key twice.
  Fields open_fields(const YAML::Node& n, std::string_view path) const;

  std::string scalar(const YAML::Node& n, std::string_view path) const;      // non-empty
  std::string text(const YAML::Node& n, std::string_view path) const;        // may be empty
  std::string token(const YAML::Node& n, std::string_view path) const;       // [a-z0-9]+
  std::string identifier(const YAML::Node& n, std::string_view path) const;  // [a-z_][a-z0-9_]*
  // An identifier that is no keyword of C, C++ or Python: tensors and scalars become parameters
  // and fields of the generated C and C++ APIs and keyword arguments of the Python wrappers.
  std::string argument_name(const YAML::Node& n, std::string_view path) const;
  int64_t integer(const YAML::Node& n, std::string_view path) const;
  bool boolean(const YAML::Node& n, std::string_view path) const;            // true / false
  std::vector<YAML::Node> list(const YAML::Node& n, std::string_view path, bool allow_empty) const;
  std::vector<std::string> scalar_list(const YAML::Node& n, std::string_view path,
                                       bool allow_empty) const;

 private:
  std::string file_;
};

bool is_token(std::string_view s);       // [a-z0-9]+: key components
bool is_identifier(std::string_view s);  // [a-z_][a-z0-9_]*: axis and variable names

}  // namespace ejk::detail
