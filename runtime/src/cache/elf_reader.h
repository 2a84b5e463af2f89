// A minimal, bounds-checked reader of ELF64 little-endian files: the header, the section
// table, section names and symbols. Every offset and size read from the file is checked
// against the buffer before use, so it is safe on arbitrary bytes (a damaged or planted cache
// entry). No libelf: it is not on every machine the runtime runs on.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ejk::cache::elf {

inline constexpr uint16_t kTypeRel = 1, kTypeExec = 2;
inline constexpr uint16_t kMachineX86_64 = 62, kMachineAarch64 = 183, kMachineCuda = 190;
inline constexpr uint32_t kSectionSymtab = 2, kSectionNobits = 8, kSectionInitArray = 14,
                          kSectionFiniArray = 15, kSectionPreinitArray = 16;
inline constexpr uint64_t kFlagExec = 0x4;

struct Section {
  std::string_view name;
  uint32_t type = 0;
  uint64_t flags = 0, offset = 0, size = 0, entry_size = 0;
  uint32_t link = 0;
};

struct Symbol {
  std::string_view name;
  uint8_t binding = 0;       // 0 local, 1 global, 2 weak
  uint16_t section = 0;      // 0: undefined
};

struct File {
  uint16_t type = 0, machine = 0;
  std::vector<Section> sections;  // names point into the parsed bytes
};

// Parses header and sections; nullopt with `problem` set when the bytes are not a well-formed
// ELF64 little-endian file.
std::optional<File> parse(std::span<const uint8_t> bytes, std::string& problem);

// The symbols of every symbol table; nullopt with `problem` set on a malformed table.
std::optional<std::vector<Symbol>> symbols(const File& file, std::span<const uint8_t> bytes,
                                           std::string& problem);

}  // namespace ejk::cache::elf
