// CpuCompiler and CpuLoader as libejk sees them: thin calls into the CPU JIT plugin
// (libejk_cpu_jit.so), which libejk loads on first need, from beside itself, else from the
// dynamic loader's search path. Without the plugin (or without the LLVM 19 it links), the
// built-in CPU variants still run and available() is false.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#include "jit/plugin_abi.h"

namespace ejk::jit {
namespace {

struct Plugin {
  const ejk_cpu_jit_plugin* api = nullptr;
  std::string problem;  // why api is null: every place tried and what it said
};

// The link map of the binary this code is linked into: libejk.so, or an executable that links
// the client statically (the tests).
link_map* own_binary(Dl_info& info) {
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&own_binary), &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0)
    return nullptr;
  return map;
}

std::string own_name() {
  Dl_info info{};
  return own_binary(info) != nullptr && info.dli_fname != nullptr ? info.dli_fname : "this binary";
}

// Where the plugin may be: beside that binary, then in every directory the dynamic loader
// searches for it (its run path, LD_LIBRARY_PATH, the system's), then by name (ld.so.cache).
// The directories are listed here rather than left to dlopen's own search, which starts from
// dlopen's caller: under a sanitizer that intercepts dlopen, that is the sanitizer's runtime.
std::vector<std::string> plugin_candidates() {
  std::vector<std::string> out;
  Dl_info info{};
  link_map* self = own_binary(info);
  if (self != nullptr && info.dli_fname != nullptr) {
    const std::string path = info.dli_fname;
    if (const size_t slash = path.rfind('/'); slash != std::string::npos)
      out.push_back(path.substr(0, slash + 1) + EJK_CPU_JIT_PLUGIN_FILE);
  }
  Dl_serinfo size{};
  if (self != nullptr && dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0) {
    std::unique_ptr<char[]> buffer(new char[size.dls_size]);
    auto* search = reinterpret_cast<Dl_serinfo*>(buffer.get());
    *search = size;
    if (dlinfo(self, RTLD_DI_SERINFO, search) == 0)
      for (unsigned i = 0; i < search->dls_cnt; ++i)
        out.push_back(fmt::format("{}/{}", search->dls_serpath[i].dls_name, EJK_CPU_JIT_PLUGIN_FILE));
  }
  out.push_back(EJK_CPU_JIT_PLUGIN_FILE);
  return out;
}

// RTLD_LOCAL: LLVM's symbols stay the plugin's, whatever else the process carries (jaxlib's
// and torch's LLVM included).
// A candidate path that does not exist is passed over without a note, so what the message lists
// is what was there and would not load (a plugin without its LLVM, say).
const ejk_cpu_jit_plugin* open_plugin(const std::string& path, std::string& problem) {
  if (path.front() == '/' && access(path.c_str(), F_OK) != 0) return nullptr;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    problem += fmt::format("\n  {}", dlerror());  // names the path
    return nullptr;
  }
  auto entry = reinterpret_cast<ejk_cpu_jit_plugin_entry>(dlsym(handle, EJK_CPU_JIT_PLUGIN_ENTRY));
  const ejk_cpu_jit_plugin* api = entry ? entry() : nullptr;
  if (api == nullptr || api->abi_version != EJK_CPU_JIT_PLUGIN_ABI) {
    problem += fmt::format("\n  {}: not a CPU JIT plugin of ABI {} (found {})", path, EJK_CPU_JIT_PLUGIN_ABI,
                           api ? std::to_string(api->abi_version) : std::string("no entry point"));
    dlclose(handle);
    return nullptr;
  }
  return api;  // stays loaded: JIT code lives in its memory until the process exits
}

const Plugin& plugin() {
  static const Plugin loaded = [] {
    Plugin p;
    for (const auto& path : plugin_candidates())
      if ((p.api = open_plugin(path, p.problem)) != nullptr) return p;
    p.problem = fmt::format("the CPU JIT plugin ({}, which needs LLVM 19) is not installed: not beside {} nor in the "
                            "dynamic loader's search path:{}", EJK_CPU_JIT_PLUGIN_FILE, own_name(), p.problem);
    return p;
  }();
  return loaded;
}

const ejk_cpu_jit_plugin& api() {
  const Plugin& p = plugin();
  if (p.api == nullptr) throw BackendUnavailable("CPU JIT: " + p.problem);
  return *p.api;
}

void append_to(void* out, const char* data, size_t size) { static_cast<std::string*>(out)->append(data, size); }

// A plugin status other than OK as the exception libejk's callers catch.
void rethrow(int status, const std::string& message) {
  switch (status) {
    case EJK_JIT_OK: return;
    case EJK_JIT_INVALID_ARGUMENT: throw InvalidArgument(message);
    case EJK_JIT_COMPILE_ERROR: throw CompileError(message);
    case EJK_JIT_UNAVAILABLE: throw BackendUnavailable(message);
    default: throw Error("CPU JIT plugin: " + message);
  }
}

std::string fact(int which) {
  std::string out;
  rethrow(api().fact(which, append_to, &out), out);
  return out;
}

std::vector<std::string> split_features(const std::string& joined) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin < joined.size();) {
    size_t end = joined.find(',', begin);
    if (end == std::string::npos) end = joined.size();
    out.push_back(joined.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace

bool CpuCompiler::available() { return plugin().api != nullptr; }

std::string CpuCompiler::unavailable_reason() { return plugin().problem; }

CpuCompiler& CpuCompiler::instance() {
  api();  // throws the reason before the constructor asks for facts
  static CpuCompiler compiler;
  return compiler;
}

CpuCompiler::CpuCompiler()
    : triple_(fact(EJK_JIT_FACT_TRIPLE)),
      cpu_(fact(EJK_JIT_FACT_HOST_CPU)),
      identity_(fact(EJK_JIT_FACT_IDENTITY)),
      features_(split_features(fact(EJK_JIT_FACT_FEATURES))) {}

std::string CpuCompiler::identity_for_march(const std::string& march) const {
  std::string out;
  rethrow(api().identity_for_march(march.c_str(), append_to, &out), out);
  return out;
}

std::vector<uint8_t> CpuCompiler::compile(const CpuSource& src) const {
  std::vector<ejk_jit_header> headers;
  headers.reserve(src.headers.size());
  for (const auto& [path, text] : src.headers) headers.push_back({path.c_str(), text.data(), text.size()});
  const ejk_jit_source c_src{src.name.c_str(), src.text.data(), src.text.size(), src.march.c_str(),
                             headers.data(), headers.size()};
  std::string out;
  rethrow(api().compile(&c_src, append_to, &out), out);
  return std::vector<uint8_t>(out.begin(), out.end());
}

struct CpuLoader::Impl {};

CpuLoader& CpuLoader::instance() {
  api();
  static CpuLoader* loader = new CpuLoader();  // never destroyed, like the plugin's
  return *loader;
}

CpuLoader::CpuLoader() : impl_(std::make_unique<Impl>()) {}

CpuLoader::~CpuLoader() = default;

void* CpuLoader::load(std::span<const uint8_t> object, const std::string& symbol) {
  void* address = nullptr;
  std::string error;
  rethrow(api().load(object.data(), object.size(), symbol.c_str(), &address, append_to, &error), error);
  return address;
}

}  // namespace ejk::jit
