#include "cuda/nvrtc_compiler.h"

#include <dlfcn.h>
#include <elf.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>

#include "ejk/core/error.h"

namespace ejk::cuda {

// NVRTC's C API, resolved with dlsym (nvrtc.h's signatures; the program is an opaque pointer).
struct NvrtcCompiler::Api {
  using Prog = struct nvrtc_prog*;
  int (*version)(int* major, int* minor);
  const char* (*error_string)(int result);
  int (*create)(Prog* prog, const char* src, const char* name, int num_headers,
                const char* const* headers, const char* const* include_names);
  int (*destroy)(Prog* prog);
  int (*compile)(Prog prog, int num_options, const char* const* options);
  int (*log_size)(Prog prog, size_t* size);
  int (*log)(Prog prog, char* log);
  int (*cubin_size)(Prog prog, size_t* size);
  int (*cubin)(Prog prog, char* cubin);
};

namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Toolkit roots to search, in order: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::vector<std::string> toolkit_roots() {
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  return roots;
}

void* open_nvrtc(std::string& tried) {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so"};
  for (const std::string& root : toolkit_roots()) names.push_back(root + "/lib64/libnvrtc.so");
  for (const std::string& n : names) {
    if (void* lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  return nullptr;
}

struct Loaded {
  NvrtcCompiler::Api api{};
  std::unique_ptr<NvrtcCompiler> compiler;
  std::string why;
};

std::string log_of(const NvrtcCompiler::Api& api, NvrtcCompiler::Api::Prog prog) {
  size_t n = 0;
  if (api.log_size(prog, &n) != 0 || n <= 1) return {};
  std::string log(n, '\0');
  api.log(prog, log.data());
  log.resize(n - 1);  // drop the terminating NUL
  return log;
}

std::string first_lines(const std::string& text, int max_lines) {
  std::istringstream in(text);
  std::string line, out;
  for (int i = 0; i < max_lines && std::getline(in, line); ++i) out += line + "\n";
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The run of digits that starts `s` as an int, and the characters it spans; nothing when `s`
// does not start with a digit or the number does not fit.
std::optional<std::pair<int, size_t>> leading_int(std::string_view s) {
  if (s.empty() || !is_digit(s.front())) return std::nullopt;
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{}) return std::nullopt;
  return std::pair{v, static_cast<size_t>(end - s.data())};
}

// The first place in `text` reading N0 seps[0] N1 seps[1] ... (each N a run of digits): the
// numbers. What regex_search finds with `(\d+)sep0(\d+)sep1...`.
template <size_t K>
std::optional<std::array<int, K>> numbers_before(std::string_view text,
                                                 const std::array<std::string_view, K>& seps) {
  for (size_t at = text.find(seps[0]); at != std::string_view::npos; at = text.find(seps[0], at + 1)) {
    size_t begin = at;
    while (begin > 0 && is_digit(text[begin - 1])) --begin;
    std::array<int, K> out{};
    std::string_view rest = text.substr(begin);
    size_t i = 0;
    for (; i < K; ++i) {
      const auto n = leading_int(rest);
      if (!n || !rest.substr(n->second).starts_with(seps[i])) break;
      out[i] = n->first;
      rest.remove_prefix(n->second + seps[i].size());
    }
    if (i == K) return out;
  }
  return std::nullopt;
}

// The number in the first `prefix` N `suffix` of `text`.
std::optional<int> number_between(std::string_view text, std::string_view prefix, std::string_view suffix) {
  for (size_t at = text.find(prefix); at != std::string_view::npos; at = text.find(prefix, at + 1)) {
    const std::string_view rest = text.substr(at + prefix.size());
    if (const auto n = leading_int(rest); n && rest.substr(n->second).starts_with(suffix)) return n->first;
  }
  return std::nullopt;
}

}  // namespace

// Target spellings and ptxas reports are read by hand, not with std::regex: libejk must carry
// no std::regex instantiations, which bound to a host process's own copies (PyTorch) and crashed.
std::string nvrtc_arch(std::string_view target) {
  std::string_view digits = target.starts_with("sm") ? target.substr(2) : std::string_view{};
  if (digits.ends_with('a')) digits.remove_suffix(1);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), is_digit))
    throw InvalidArgument("CUDA target '" + std::string(target) + "': expected sm<digits>[a], e.g. sm80 or sm90a");
  return "sm_" + std::string(target.substr(2));
}

KernelResources parse_ptxas_report(std::string_view log, std::string_view symbol) {
  KernelResources r;
  const size_t at = log.find("Compiling entry function '" + std::string(symbol) + "'");
  if (at == std::string_view::npos) return r;
  // The report of one function ends where the next "Compiling entry function" begins.
  const size_t end = log.find("Compiling entry function", at + 1);
  const std::string_view part = log.substr(at, end == std::string_view::npos ? end : end - at);
  using Seps3 = std::array<std::string_view, 3>;
  if (const auto frame = numbers_before(part, Seps3{" bytes stack frame, ", " bytes spill stores, ",
                                                    " bytes spill loads"})) {
    r.stack_bytes = (*frame)[0];
    r.spill_store_bytes = (*frame)[1];
    r.spill_load_bytes = (*frame)[2];
  }
  if (const auto regs = number_between(part, "Used ", " registers")) r.registers = *regs;
  // ptxas prints "N bytes smem" only when there is static smem.
  const auto smem = numbers_before(part, std::array<std::string_view, 1>{" bytes smem"});
  r.static_smem_bytes = smem ? (*smem)[0] : 0;
  return r;
}

namespace {

// Section headers and names of a 64-bit ELF image, bounds-checked.
class ElfView {
 public:
  ElfView(const std::vector<uint8_t>& image, std::string_view what) : img_(image) {
    if (img_.size() < sizeof(eh_) || std::memcmp(img_.data(), ELFMAG, SELFMAG) != 0 ||
        img_[EI_CLASS] != ELFCLASS64)
      throw InvalidArgument(std::string(what) + ": expected a 64-bit ELF image");
    std::memcpy(&eh_, img_.data(), sizeof(eh_));
  }
  size_t count() const { return eh_.e_shnum; }
  Elf64_Shdr section(size_t i) const {
    Elf64_Shdr sh{};
    const size_t at = eh_.e_shoff + i * eh_.e_shentsize;
    if (at + sizeof(sh) <= img_.size()) std::memcpy(&sh, img_.data() + at, sizeof(sh));
    return sh;
  }
  std::string_view str(const Elf64_Shdr& table, size_t offset) const {
    const size_t at = table.sh_offset + offset;
    if (at >= img_.size()) return {};
    const char* p = reinterpret_cast<const char*>(img_.data() + at);
    return {p, strnlen(p, img_.size() - at)};
  }
  std::string_view name(const Elf64_Shdr& sh) const { return str(section(eh_.e_shstrndx), sh.sh_name); }
  const uint8_t* bytes(size_t offset) const { return img_.data() + offset; }
  bool in_range(size_t offset, size_t n) const { return offset + n <= img_.size(); }

 private:
  const std::vector<uint8_t>& img_;
  Elf64_Ehdr eh_{};
};

// Index of `symbol` in the ELF's .symtab, or -1.
long symbol_index(const ElfView& elf, std::string_view symbol) {
  for (size_t i = 0; i < elf.count(); ++i) {
    const Elf64_Shdr sh = elf.section(i);
    if (sh.sh_type != SHT_SYMTAB || !elf.in_range(sh.sh_offset, sh.sh_size)) continue;
    const Elf64_Shdr strings = elf.section(sh.sh_link);
    for (size_t k = 0; k * sizeof(Elf64_Sym) < sh.sh_size; ++k) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.bytes(sh.sh_offset + k * sizeof(Elf64_Sym)), sizeof(sym));
      if (elf.str(strings, sym.st_name) == symbol) return long(k);
    }
  }
  return -1;
}

}  // namespace

KernelResources cubin_resources(const std::vector<uint8_t>& cubin, std::string_view symbol) {
  const ElfView elf(cubin, "cubin of " + std::string(symbol));
  KernelResources r;
  const long index = symbol_index(elf, symbol);
  if (index < 0) return r;
  // Static shared memory is a NOBITS section per entry; dynamic shared memory is the launch's.
  r.static_smem_bytes = 0;
  const std::string shared_section = ".nv.shared." + std::string(symbol);
  for (size_t i = 0; i < elf.count(); ++i) {
    const Elf64_Shdr sh = elf.section(i);
    if (elf.name(sh) == shared_section) r.static_smem_bytes = int(sh.sh_size);
  }
  // .nv.info holds (format, attribute) records; format 4 carries a u16 size and a payload.
  // EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11) payloads are (u32 symbol, u32 value).
  constexpr uint8_t kSizedValue = 4, kRegCount = 0x2f, kFrameSize = 0x11;
  for (size_t i = 0; i < elf.count(); ++i) {
    const Elf64_Shdr sh = elf.section(i);
    if (elf.name(sh) != ".nv.info" || !elf.in_range(sh.sh_offset, sh.sh_size)) continue;
    const uint8_t* p = elf.bytes(sh.sh_offset);
    for (size_t at = 0; at + 4 <= sh.sh_size;) {
      const uint8_t format = p[at], attribute = p[at + 1];
      if (format != kSizedValue) {
        at += format == 1 ? 2 : 4;  // no value / 16-bit value records
        continue;
      }
      uint16_t size;
      std::memcpy(&size, p + at + 2, 2);
      if (size == 8 && at + 12 <= sh.sh_size) {
        uint32_t sym, value;
        std::memcpy(&sym, p + at + 4, 4);
        std::memcpy(&value, p + at + 8, 4);
        if (long(sym) == index && attribute == kRegCount) r.registers = int(value);
        if (long(sym) == index && attribute == kFrameSize) r.stack_bytes = int(value);
      }
      at += 4 + size;
    }
  }
  return r;
}

const NvrtcCompiler* NvrtcCompiler::load(std::string* why) {
  static Loaded* loaded = [] {
    auto* l = new Loaded();  // lives for the process, like the library it points into
    std::string tried;
    void* lib = open_nvrtc(tried);
    if (lib == nullptr) {
      l->why = "NVRTC not found (tried " + tried + "); install the CUDA toolkit or set CUDA_HOME";
      return l;
    }
    Api& a = l->api;
    const std::pair<void**, const char*> syms[] = {
        {reinterpret_cast<void**>(&a.version), "nvrtcVersion"},
        {reinterpret_cast<void**>(&a.error_string), "nvrtcGetErrorString"},
        {reinterpret_cast<void**>(&a.create), "nvrtcCreateProgram"},
        {reinterpret_cast<void**>(&a.destroy), "nvrtcDestroyProgram"},
        {reinterpret_cast<void**>(&a.compile), "nvrtcCompileProgram"},
        {reinterpret_cast<void**>(&a.log_size), "nvrtcGetProgramLogSize"},
        {reinterpret_cast<void**>(&a.log), "nvrtcGetProgramLog"},
        {reinterpret_cast<void**>(&a.cubin_size), "nvrtcGetCUBINSize"},
        {reinterpret_cast<void**>(&a.cubin), "nvrtcGetCUBIN"}};
    for (const auto& [slot, name] : syms) {
      *slot = dlsym(lib, name);
      if (*slot == nullptr) {
        l->why = std::string("libnvrtc lacks ") + name;
        return l;
      }
    }
    int major = 0, minor = 0;
    a.version(&major, &minor);
    std::string include;
    for (const std::string& root : toolkit_roots())
      if (is_dir(root + "/include")) {
        include = root + "/include";
        break;
      }
    l->compiler.reset(new NvrtcCompiler(&l->api,
                                        "nvrtc " + std::to_string(major) + "." + std::to_string(minor),
                                        include));
    return l;
  }();
  if (loaded->compiler == nullptr && why != nullptr) *why = loaded->why;
  return loaded->compiler.get();
}

const NvrtcCompiler& NvrtcCompiler::get() {
  std::string why;
  const NvrtcCompiler* c = load(&why);
  if (c == nullptr) throw BackendUnavailable("CUDA JIT unavailable: " + why);
  return *c;
}

CubinResult NvrtcCompiler::compile(const CudaSource& src, std::string_view arch,
                                   std::string_view symbol) const {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : src.headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  // Destroys the program on every path out of this function.
  struct Program {
    const Api* api;
    Api::Prog prog = nullptr;
    ~Program() {
      if (prog != nullptr) api->destroy(&prog);
    }
  } program{api_};
  Api::Prog& prog = program.prog;
  if (int r = api_->create(&prog, src.text.c_str(), src.name.c_str(), int(header_texts.size()),
                           header_texts.data(), header_names.data());
      r != 0)
    throw CompileError("NVRTC: cannot create program " + src.name + ": " + api_->error_string(r));
  const std::string arch_opt = "--gpu-architecture=" + std::string(arch);
  const std::string include_opt = "-I" + cuda_include_;
  // --no-cache: NVRTC's own cache lives in the driver's compute cache, and opening it starts
  // CUDA in the process: ~0.2 s of the first compile on a GPU host. The runtime's disk cache
  // already keeps every cubin, keyed by its inputs.
  std::vector<const char*> opts = {arch_opt.c_str(), "-std=c++20", "--ptxas-options=-v",
                                   "-default-device", "-DNDEBUG", "--no-cache"};
  if (!cuda_include_.empty()) opts.push_back(include_opt.c_str());
  const int rc = api_->compile(prog, int(opts.size()), opts.data());
  CubinResult out;
  out.log = log_of(*api_, prog);
  if (rc != 0) {
    throw CompileError("NVRTC failed to compile " + src.name + " for " + std::string(arch) +
                       ": " + api_->error_string(rc) + "\n" + first_lines(out.log, 40));
  }
  size_t n = 0;
  api_->cubin_size(prog, &n);
  out.cubin.resize(n);
  api_->cubin(prog, reinterpret_cast<char*>(out.cubin.data()));
  out.resources = parse_ptxas_report(out.log, symbol);
  const KernelResources from_cubin = cubin_resources(out.cubin, symbol);
  out.resources.registers = from_cubin.registers;
  out.resources.static_smem_bytes = from_cubin.static_smem_bytes;
  if (out.resources.stack_bytes < 0) out.resources.stack_bytes = from_cubin.stack_bytes;
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ejk::cuda
