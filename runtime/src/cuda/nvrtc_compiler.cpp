#include "cuda/nvrtc_compiler.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <regex>
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

}  // namespace

std::string nvrtc_arch(std::string_view target) {
  static const std::regex spelled("sm([0-9]+)(a?)");
  std::cmatch m;
  const std::string t(target);
  if (!std::regex_match(t.c_str(), m, spelled))
    throw InvalidArgument("CUDA target '" + t + "': expected sm<digits>[a], e.g. sm80 or sm90a");
  return "sm_" + m[1].str() + m[2].str();
}

KernelResources parse_ptxas_report(std::string_view log, std::string_view symbol) {
  KernelResources r;
  const std::string text(log);
  const size_t at = text.find("Compiling entry function '" + std::string(symbol) + "'");
  if (at == std::string::npos) return r;
  // The report of one function ends where the next "Compiling entry function" begins.
  const size_t end = text.find("Compiling entry function", at + 1);
  const std::string part = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::smatch m;
  if (std::regex_search(part, m, std::regex(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    r.stack_bytes = std::stoi(m[1]);
    r.spill_store_bytes = std::stoi(m[2]);
    r.spill_load_bytes = std::stoi(m[3]);
  }
  if (std::regex_search(part, m, std::regex(R"(Used (\d+) registers)"))) r.registers = std::stoi(m[1]);
  r.static_smem_bytes = 0;  // ptxas prints "N bytes smem" only when there is static smem
  if (std::regex_search(part, m, std::regex(R"((\d+) bytes smem)"))) r.static_smem_bytes = std::stoi(m[1]);
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
  std::vector<const char*> opts = {arch_opt.c_str(), "-std=c++20", "--ptxas-options=-v",
                                   "-default-device", "-DNDEBUG"};
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
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ejk::cuda
