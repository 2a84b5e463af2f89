#include "cache/payload_check.h"

#include <dlfcn.h>

#include <array>

#include <fmt/format.h>

#include "cache/elf_reader.h"
#include "cache/entry_names.h"

namespace ejk::cache {
namespace {

#if defined(__aarch64__)
constexpr uint16_t kHostMachine = elf::kMachineAarch64;
#else
constexpr uint16_t kHostMachine = elf::kMachineX86_64;
#endif

// Sections whose code a linker or loader runs without being asked to (and their ".<n>" forms).
constexpr std::array<std::string_view, 7> kRunAtLoad = {
    ".init_array", ".preinit_array", ".ctors", ".init", ".fini_array", ".dtors", ".fini"};

bool runs_at_load(const elf::Section& s) {
  if (s.type == elf::kSectionInitArray || s.type == elf::kSectionPreinitArray ||
      s.type == elf::kSectionFiniArray)
    return true;
  for (std::string_view name : kRunAtLoad)
    if (s.name == name || (s.name.starts_with(name) && s.name[name.size()] == '.')) return true;
  return false;
}

// A global or weak symbol named `symbol`, defined in an executable section.
bool defines_function(const elf::File& f, const std::vector<elf::Symbol>& symbols,
                      std::string_view symbol) {
  for (const elf::Symbol& s : symbols) {
    if (s.name != symbol || (s.binding != 1 && s.binding != 2)) continue;
    if (s.section == 0 || s.section >= f.sections.size()) continue;
    if (f.sections[s.section].flags & elf::kFlagExec) return true;
  }
  return false;
}

bool defines_any(const std::vector<elf::Symbol>& symbols, std::string_view symbol) {
  for (const elf::Symbol& s : symbols)
    if (s.name == symbol && s.section != 0) return true;
  return false;
}

// The first global symbol the object uses but does not define that this process cannot provide
// (the loader resolves undefined symbols against the running process, so such an entry would
// fail to link at its first call). Weak references may stay unresolved.
std::optional<std::string_view> unresolved(const std::vector<elf::Symbol>& symbols) {
  for (const elf::Symbol& s : symbols) {
    if (s.section != 0 || s.binding != 1 || s.name.empty() || defines_any(symbols, s.name)) continue;
    const std::string name(s.name);
    if (::dlsym(RTLD_DEFAULT, name.c_str()) == nullptr) return s.name;
  }
  return std::nullopt;
}

std::optional<std::string> check_cpu(const elf::File& f, const std::vector<elf::Symbol>& symbols,
                                     std::string_view symbol) {
  if (f.type != elf::kTypeRel)
    return fmt::format("ELF type {} is not a relocatable object (ET_REL)", f.type);
  if (f.machine != kHostMachine)
    return fmt::format("ELF machine {} is not this CPU's ({})", f.machine, kHostMachine);
  for (const elf::Section& s : f.sections)
    if (runs_at_load(s))
      return fmt::format("has section '{}', which would run code at load time",
                         names::printable(s.name));
  if (!defines_function(f, symbols, symbol))
    return fmt::format("does not define the kernel function '{}'", symbol);
  if (auto missing = unresolved(symbols))
    return fmt::format("does not link: it needs '{}', which this process does not provide",
                       names::printable(*missing));
  return std::nullopt;
}

std::optional<std::string> check_cuda(const elf::File& f, const std::vector<elf::Symbol>& symbols,
                                      std::string_view symbol) {
  if (f.machine != elf::kMachineCuda)
    return fmt::format("ELF machine {} is not a CUDA cubin ({})", f.machine, elf::kMachineCuda);
  const std::string text = fmt::format(".text.{}", symbol);
  for (const elf::Section& s : f.sections)
    if (s.name == text) return std::nullopt;
  if (defines_any(symbols, symbol)) return std::nullopt;
  return fmt::format("has no kernel '{}' (no section {} and no such symbol)", symbol, text);
}

}  // namespace

std::optional<std::string> check_payload(std::string_view backend, std::string_view symbol,
                                         std::span<const uint8_t> bytes) {
  if (backend != "cpu" && backend != "cuda") return std::nullopt;
  std::string problem;
  std::optional<elf::File> file = elf::parse(bytes, problem);
  if (!file) return problem;
  auto symbols = elf::symbols(*file, bytes, problem);
  if (!symbols) return problem;
  return backend == "cpu" ? check_cpu(*file, *symbols, symbol)
                          : check_cuda(*file, *symbols, symbol);
}

std::string symbol_for_key(std::string_view key) {
  std::string s = "ejk_";
  s += key;
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

}  // namespace ejk::cache
