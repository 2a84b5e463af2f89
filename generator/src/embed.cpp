#include "embed.h"

#include <fmt/format.h>


namespace ejk::gen {
namespace {

bool raw_safe(std::string_view text) {
  for (unsigned char c : text)
    if (!((c >= 0x20 && c <= 0x7e) || c == '\n' || c == '\t')) return false;
  return true;
}

// Octal escapes take at most three digits, so unlike \x they cannot swallow a following
// character that happens to be a hex digit.
void append_escaped(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c >= 0x20 && c <= 0x7e) out += static_cast<char>(c);
      else out += fmt::format("\\{:03o}", c);
  }
}

}  // namespace

std::string cpp_quoted(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) append_escaped(out, c);
  return out + "\"";
}

std::string cpp_string_literal(std::string_view text) {
  if (raw_safe(text)) {
    for (int n = 0; n < 1000; ++n) {
      const std::string delim = n == 0 ? "ejk" : fmt::format("ejk{}", n);
      if (text.find(")" + delim + "\"") == std::string_view::npos)
        return fmt::format("R\"{}({}){}\"", delim, text, delim);
    }
  }
  // Adjacent literals of one line each keep the generated file readable and diffable.
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string_view::npos ? text.size() : end + 1;
    out += (out.empty() ? "" : "\n    ") + cpp_quoted(text.substr(start, end - start));
    start = end;
  }
  return out.empty() ? "\"\"" : out;
}

std::string cpp_byte_list(std::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i % 16 == 0) out += "\n    ";
    out += fmt::format("0x{:02x},", static_cast<unsigned char>(bytes[i]));
  }
  return out;
}

}  // namespace ejk::gen
