// Builds small ELF64 little-endian files in memory for the payload-check tests: a text
// section, a symbol table and any extra sections a case needs (an .init_array, a cubin's
// .text.<kernel>), each field settable so a case can break exactly one thing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ejk::test {

struct ElfSymbol {
  std::string name;
  uint8_t binding = 1;  // 1 global, 0 local, 2 weak
  uint16_t section = 1;  // index into ElfSpec::sections + 1 (0: undefined)
};

struct ElfSection {
  std::string name;
  uint32_t type = 1;    // SHT_PROGBITS
  uint64_t flags = 0x6;  // SHF_ALLOC | SHF_EXECINSTR
  std::vector<uint8_t> bytes = {0xc3};
};

struct ElfSpec {
  uint16_t type = 1;       // ET_REL
  uint16_t machine = 62;   // EM_X86_64
  std::vector<ElfSection> sections = {ElfSection{".text"}};
  std::vector<ElfSymbol> symbols;
};

namespace detail {
inline void put(std::vector<uint8_t>& out, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t add_string(std::vector<uint8_t>& table, const std::string& s) {
  uint32_t at = static_cast<uint32_t>(table.size());
  table.insert(table.end(), s.begin(), s.end());
  table.push_back(0);
  return at;
}
}  // namespace detail

// Layout: header, section contents, then the section table. Sections: null, spec.sections...,
// .symtab, .strtab, .shstrtab.
inline std::vector<uint8_t> build_elf(const ElfSpec& spec) {
  using detail::put;
  std::vector<uint8_t> strtab{0}, shstrtab{0}, symtab(24, 0);
  for (const ElfSymbol& s : spec.symbols) {
    std::vector<uint8_t> sym(24, 0);
    put(sym, 0, detail::add_string(strtab, s.name), 4);
    sym[4] = static_cast<uint8_t>((s.binding << 4) | 2);  // STT_FUNC
    put(sym, 6, s.section, 2);
    symtab.insert(symtab.end(), sym.begin(), sym.end());
  }
  struct Out { uint32_t name; uint32_t type; uint64_t flags; std::vector<uint8_t> bytes; uint32_t link; uint64_t entsize; };
  std::vector<Out> all;
  for (const ElfSection& s : spec.sections)
    all.push_back({detail::add_string(shstrtab, s.name), s.type, s.flags, s.bytes, 0, 0});
  const uint32_t strtab_index = static_cast<uint32_t>(spec.sections.size() + 2);
  all.push_back({detail::add_string(shstrtab, ".symtab"), 2, 0, symtab, strtab_index, 24});
  all.push_back({detail::add_string(shstrtab, ".strtab"), 3, 0, strtab, 0, 0});
  uint32_t shstr_name = detail::add_string(shstrtab, ".shstrtab");
  all.push_back({shstr_name, 3, 0, shstrtab, 0, 0});

  std::vector<uint8_t> out(64, 0);
  std::vector<uint64_t> offsets;
  for (const Out& s : all) {
    offsets.push_back(out.size());
    out.insert(out.end(), s.bytes.begin(), s.bytes.end());
  }
  while (out.size() % 8) out.push_back(0);
  const uint64_t shoff = out.size();
  out.resize(out.size() + 64 * (all.size() + 1), 0);
  for (size_t i = 0; i < all.size(); ++i) {
    size_t at = shoff + 64 * (i + 1);
    put(out, at, all[i].name, 4);
    put(out, at + 4, all[i].type, 4);
    put(out, at + 8, all[i].flags, 8);
    put(out, at + 24, offsets[i], 8);
    put(out, at + 32, all[i].bytes.size(), 8);
    put(out, at + 40, all[i].link, 4);
    put(out, at + 56, all[i].entsize, 8);
  }
  const uint8_t ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::copy(std::begin(ident), std::end(ident), out.begin());
  put(out, 16, spec.type, 2);
  put(out, 18, spec.machine, 2);
  put(out, 20, 1, 4);
  put(out, 40, shoff, 8);
  put(out, 52, 64, 2);
  put(out, 58, 64, 2);
  put(out, 60, all.size() + 1, 2);
  put(out, 62, all.size(), 2);  // .shstrtab is last
  return out;
}

// A CPU object defining `symbol` in .text, as the JIT produces (no initializers).
inline std::vector<uint8_t> cpu_object(const std::string& symbol) {
  ElfSpec spec;
  spec.symbols = {{symbol}};
  return build_elf(spec);
}

}  // namespace ejk::test
