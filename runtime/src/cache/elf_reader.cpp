#include "cache/elf_reader.h"

#include <cstring>

#include <fmt/format.h>

namespace ejk::cache::elf {
namespace {

constexpr size_t kHeaderSize = 64, kSectionHeaderSize = 64, kSymbolSize = 24;
constexpr uint16_t kFirstReservedIndex = 0xff00;  // SHN_LORESERVE: extended numbering

uint64_t get(std::span<const uint8_t> b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// True when [offset, offset + size) lies inside a buffer of `total` bytes.
bool in_bounds(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

// The NUL-terminated string at `at` inside the string table `table`; nullopt when it runs off.
std::optional<std::string_view> string_at(std::span<const uint8_t> table, uint64_t at) {
  if (at >= table.size()) return std::nullopt;
  const auto* start = reinterpret_cast<const char*>(table.data() + at);
  const void* nul = std::memchr(start, '\0', table.size() - at);
  if (nul == nullptr) return std::nullopt;
  return std::string_view(start, static_cast<const char*>(nul) - start);
}

bool check_ident(std::span<const uint8_t> b, std::string& problem) {
  if (b.size() < kHeaderSize) {
    problem = fmt::format("not an ELF file: {} bytes, shorter than an ELF64 header", b.size());
    return false;
  }
  if (b[0] != 0x7f || b[1] != 'E' || b[2] != 'L' || b[3] != 'F') {
    problem = "not an ELF file (bad magic)";
    return false;
  }
  if (b[4] != 2 || b[5] != 1) {
    problem = "not a 64-bit little-endian ELF file";
    return false;
  }
  return true;
}

Section read_section(std::span<const uint8_t> b, size_t at) {
  Section s;
  s.type = static_cast<uint32_t>(get(b, at + 4, 4));
  s.flags = get(b, at + 8, 8);
  s.offset = get(b, at + 24, 8);
  s.size = get(b, at + 32, 8);
  s.link = static_cast<uint32_t>(get(b, at + 40, 4));
  s.entry_size = get(b, at + 56, 8);
  return s;
}

// Reads the section table and checks that each section's bytes lie inside the file.
bool read_sections(std::span<const uint8_t> b, File& f, std::string& problem) {
  const uint64_t offset = get(b, 40, 8);
  const uint64_t entry_size = get(b, 58, 2), count = get(b, 60, 2);
  if (count == 0) return true;  // no sections (or extended numbering, rejected by the caller)
  if (entry_size != kSectionHeaderSize || !in_bounds(offset, count * entry_size, b.size())) {
    problem = "section header table lies outside the file";
    return false;
  }
  std::vector<uint32_t> name_offsets;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = static_cast<size_t>(offset + i * entry_size);
    Section s = read_section(b, at);
    if (s.type != kSectionNobits && !in_bounds(s.offset, s.size, b.size())) {
      problem = fmt::format("section {} lies outside the file", i);
      return false;
    }
    f.sections.push_back(s);
    name_offsets.push_back(static_cast<uint32_t>(get(b, at, 4)));
  }
  const uint64_t names_index = get(b, 62, 2);
  if (names_index == 0) return true;  // no section names
  if (names_index >= f.sections.size() || f.sections[names_index].type == kSectionNobits) {
    problem = "section name table index is out of range";
    return false;
  }
  const Section& names = f.sections[names_index];
  auto table = b.subspan(static_cast<size_t>(names.offset), static_cast<size_t>(names.size));
  for (size_t i = 0; i < f.sections.size(); ++i) {
    auto name = string_at(table, name_offsets[i]);
    if (!name) {
      problem = fmt::format("section {} has a name outside the name table", i);
      return false;
    }
    f.sections[i].name = *name;
  }
  return true;
}

}  // namespace

std::optional<File> parse(std::span<const uint8_t> bytes, std::string& problem) {
  if (!check_ident(bytes, problem)) return std::nullopt;
  File f;
  f.type = static_cast<uint16_t>(get(bytes, 16, 2));
  f.machine = static_cast<uint16_t>(get(bytes, 18, 2));
  const uint64_t count = get(bytes, 60, 2), names_index = get(bytes, 62, 2);
  if ((count == 0 && get(bytes, 40, 8) != 0) || names_index >= kFirstReservedIndex) {
    problem = "extended section numbering is not supported";
    return std::nullopt;
  }
  if (!read_sections(bytes, f, problem)) return std::nullopt;
  return f;
}

std::optional<std::vector<Symbol>> symbols(const File& file, std::span<const uint8_t> bytes,
                                           std::string& problem) {
  std::vector<Symbol> out;
  for (size_t i = 0; i < file.sections.size(); ++i) {
    const Section& s = file.sections[i];
    if (s.type != kSectionSymtab) continue;
    if (s.entry_size != kSymbolSize || s.size % kSymbolSize != 0 || s.link == 0 ||
        s.link >= file.sections.size() || file.sections[s.link].type == kSectionNobits) {
      problem = fmt::format("symbol table in section {} is malformed", i);
      return std::nullopt;
    }
    const Section& strings = file.sections[s.link];
    auto names = bytes.subspan(static_cast<size_t>(strings.offset), static_cast<size_t>(strings.size));
    for (uint64_t at = s.offset; at < s.offset + s.size; at += kSymbolSize) {
      auto name = string_at(names, get(bytes, static_cast<size_t>(at), 4));
      if (!name) {
        problem = fmt::format("a symbol in section {} has a name outside its string table", i);
        return std::nullopt;
      }
      Symbol sym;
      sym.name = *name;
      sym.binding = static_cast<uint8_t>(bytes[static_cast<size_t>(at) + 4] >> 4);
      sym.section = static_cast<uint16_t>(get(bytes, static_cast<size_t>(at) + 6, 2));
      out.push_back(sym);
    }
  }
  return out;
}

}  // namespace ejk::cache::elf
