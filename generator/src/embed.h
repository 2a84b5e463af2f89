// Spelling data as C++ source: the registry carries specs, templates, kernel headers and
// cubins inside the library, so the runtime needs no files beside it.
#pragma once
#include <string>
#include <string_view>

namespace ejk::gen {

// A string literal holding exactly `text`. Printable ASCII text (with newlines and tabs)
// becomes a raw string literal, readable in the generated file, with a delimiter chosen so
// that ")delim\"" does not occur in the text; anything else becomes an escaped literal.
std::string cpp_string_literal(std::string_view text);

// A short quoted literal ("specs/flash_attention.yaml", keys, symbols), escaped.
std::string cpp_quoted(std::string_view text);

// The element list of an unsigned char array, 16 bytes a line: "0x7f, 0x45, ...".
std::string cpp_byte_list(std::string_view bytes);

}  // namespace ejk::gen
