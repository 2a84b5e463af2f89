// Template rendering. Errors are SpecError: a template is a source file of the spec library,
// and its messages follow the spec's "file:line: what" form.
#include "ejk/core/render.h"

#include <fmt/format.h>

#include <cctype>

#include "ejk/core/error.h"

namespace ejk {
namespace {

size_t line_of(std::string_view text, size_t pos) {
  size_t line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i)
    if (text[i] == '\n') ++line;
  return line;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            std::string_view template_name) {
  std::string out;
  out.reserve(text.size() + 256);
  size_t pos = 0;
  while (true) {
    const size_t open = text.find("{{", pos);
    if (open == std::string_view::npos) break;
    out.append(text.substr(pos, open - pos));
    const size_t close = text.find("}}", open + 2);
    const size_t newline = text.find('\n', open + 2);
    // A placeholder never spans lines: a lone "{{" must not swallow the rest of the file.
    if (close == std::string_view::npos || (newline != std::string_view::npos && newline < close))
      throw SpecError(fmt::format("{}:{}: unterminated placeholder: expected '}}}}'",
                                        template_name, line_of(text, open)));
    const std::string_view name = trim(text.substr(open + 2, close - open - 2));
    if (!is_identifier(name))
      throw SpecError(fmt::format(
          "{}:{}: malformed placeholder '{{{{{}}}}}': expected an identifier",
          template_name, line_of(text, open), name));
    auto it = vars.find(std::string(name));
    if (it == vars.end()) {
      std::string known;
      for (const auto& [k, v] : vars) known += (known.empty() ? "" : ", ") + k;
      throw SpecError(fmt::format("{}:{}: unknown placeholder '{}' (known: {})",
                                        template_name, line_of(text, open), name, known));
    }
    out += it->second;
    pos = close + 2;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace ejk
