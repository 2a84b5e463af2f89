// CpuCompiler on clang 19's C++ API: cc1 arguments -> CompilerInvocation -> EmitObjAction,
// with the object written to memory. Building cc1 arguments directly (instead of going
// through the Driver) keeps the flags explicit and identical on every machine.
#include "jit/cpu_compiler.h"

#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Basic/Version.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/VirtualFileSystem.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "ejk/core/error.h"

namespace ejk::jit {
namespace {

// Root of the in-memory file system: sources live here, headers under its include/.
constexpr const char* kVirtualRoot = "/ejk-jit";
constexpr int kDiagnosticLines = 40;

// Clang's xmmintrin.h includes <mm_malloc.h> in hosted mode, which includes the C library's
// <stdlib.h>, absent here by design. This stand-in, found first because -I precedes the
// builtin directory, lets kernels use immintrin.h; only _mm_malloc/_mm_free are missing.
constexpr const char* kMmMallocShimPath = "mm_malloc.h";
constexpr const char* kMmMallocShim =
    "// ejk CPU JIT stand-in: intrinsics without _mm_malloc (no C library here).\n"
    "#pragma once\n";

void initialize_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();  // inline asm in kernels
  });
}

// "+feature" / "-feature" for every feature LLVM knows the host to have or lack, sorted so the
// list (and the cache identity built from it) is stable.
std::vector<std::string> detect_host_features() {
  std::vector<std::string> out;
  for (const auto& entry : llvm::sys::getHostCPUFeatures()) {
    std::string flag(1, entry.getValue() ? '+' : '-');
    flag.append(entry.getKey().data(), entry.getKey().size());
    out.push_back(std::move(flag));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Flags of every compile besides target and input. cc1 defaults already give no exceptions
// and no math errno; -fno-math-errno is a driver flag, so it is spelled by its absence here.
std::vector<std::string> common_flags() {
  return {"-O3",
          "-std=c++20",
          "-fno-rtti",
          "-ffp-contract=fast",
          // The driver adds these at -O2 and above; cc1 alone would not vectorize.
          "-vectorize-loops",
          "-vectorize-slp",
          // Loops that need unrolling (register tiles, transposes) say so with
          // #pragma GCC unroll, as GCC -O3 (the AOT build) also needs; clang's own unrolling
          // of every other loop cost a third of an AMX variant's compile and gained nothing.
          "-fno-unroll-loops",
          // JITLink may place code anywhere; PIC avoids 32-bit absolute relocations.
          "-mrelocation-model",
          "pic",
          "-pic-level",
          "2",
          "-fhalf-no-semantic-interposition",
          "-fgnuc-version=4.2.1",  // same __GNUC__ view as the g++ AOT build
          // What the driver of a release clang adds: less work and memory per compile.
          "-disable-llvm-verifier",
          "-discard-value-names",
          "-clear-ast-before-backend",
          "-nostdsysteminc",
          "-nobuiltininc",
          "-emit-obj"};
}

// Clang's builtin headers (immintrin.h, ...) when installed (libclang-common-19-dev); kernels
// do not need them, so their absence only disables intrinsics headers.
std::string find_resource_dir() {
  std::string dir = EJK_CLANG_RESOURCE_DIR;
  return llvm::sys::fs::is_directory(dir + "/include") ? dir : std::string();
}

std::string sanitized_file_name(const std::string& name) {
  std::string out = name.empty() ? std::string("kernel.cpp") : name;
  for (char& c : out) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

void check_header_path(const std::string& path) {
  bool bad = path.empty() || path.front() == '/' || path == ".." || path.starts_with("../") ||
             path.find("/../") != std::string::npos || path.ends_with("/..");
  if (bad)
    throw InvalidArgument(fmt::format(
        "CpuSource header path \"{}\": expected a relative path inside the include root, as "
        "written in #include \"...\"",
        path));
}

llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> make_file_system(const CpuSource& src,
                                                                 const std::string& main_path) {
  auto memory = llvm::makeIntrusiveRefCnt<llvm::vfs::InMemoryFileSystem>();
  memory->addFile(main_path, 0, llvm::MemoryBuffer::getMemBufferCopy(src.text, main_path));
  for (const auto& [path, text] : src.headers) {
    check_header_path(path);
    std::string full = fmt::format("{}/include/{}", kVirtualRoot, path);
    if (!memory->addFile(full, 0, llvm::MemoryBuffer::getMemBufferCopy(text, full)))
      throw InvalidArgument(fmt::format(
          "CpuSource header path \"{}\": given twice with different text (expected unique paths)",
          path));
  }
  bool has_shim = std::any_of(src.headers.begin(), src.headers.end(),
                              [](const auto& h) { return h.first == kMmMallocShimPath; });
  if (!has_shim) {
    std::string full = fmt::format("{}/include/{}", kVirtualRoot, kMmMallocShimPath);
    memory->addFile(full, 0, llvm::MemoryBuffer::getMemBuffer(kMmMallocShim, full));
  }
  // The real file system underneath only serves clang's builtin headers.
  auto overlay = llvm::makeIntrusiveRefCnt<llvm::vfs::OverlayFileSystem>(
      llvm::vfs::getRealFileSystem());
  overlay->pushOverlay(memory);
  return overlay;
}

std::string first_lines(const std::string& text, int count) {
  size_t end = 0;
  for (int i = 0; i < count && end != std::string::npos; ++i) {
    end = text.find('\n', end);
    if (end != std::string::npos) ++end;
  }
  if (end == std::string::npos || end >= text.size()) return text;
  return text.substr(0, end) + "[... more diagnostics cut]\n";
}

// One cc1 run: arguments -> CompilerInvocation -> EmitObjAction, object written to `object`.
// Everything clang prints (diagnostics, "N errors generated") goes to `log`, never to stderr.
bool run_clang(const std::vector<std::string>& args,
               llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> files,
               llvm::SmallVectorImpl<char>& object, std::string& log) {
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  llvm::raw_string_ostream log_stream(log);
  auto diag_options = llvm::makeIntrusiveRefCnt<clang::DiagnosticOptions>();
  clang::TextDiagnosticPrinter arg_printer(log_stream, diag_options.get());
  clang::DiagnosticsEngine arg_diags(llvm::makeIntrusiveRefCnt<clang::DiagnosticIDs>(),
                                     diag_options, &arg_printer, /*ShouldOwnClient=*/false);
  bool ok = false;
  {
    clang::CompilerInstance ci;
    ok = clang::CompilerInvocation::CreateFromArgs(ci.getInvocation(), argv, arg_diags);
    if (ok) {
      ci.createDiagnostics(new clang::TextDiagnosticPrinter(log_stream, &ci.getDiagnosticOpts()),
                           /*ShouldOwnClient=*/true);
      ci.setVerboseOutputStream(log_stream);
      ci.createFileManager(std::move(files));
      ci.setOutputStream(std::make_unique<llvm::raw_svector_ostream>(object));
      clang::EmitObjAction action;
      ok = ci.ExecuteAction(action) && !ci.getDiagnostics().hasErrorOccurred();
    }
  }  // the action and its output stream are gone here, so `object` is complete
  log_stream.flush();
  return ok;
}

std::string join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out.push_back(sep);
    out += item;
  }
  return out;
}

}  // namespace

bool CpuCompiler::available() { return true; }

std::string CpuCompiler::unavailable_reason() { return {}; }

CpuCompiler& CpuCompiler::instance() {
  static CpuCompiler compiler;  // C++ guarantees thread-safe one-time construction
  return compiler;
}

CpuCompiler::CpuCompiler()
    : triple_(llvm::sys::getProcessTriple()),
      cpu_(llvm::sys::getHostCPUName().str()),
      resource_dir_(find_resource_dir()),
      features_(detect_host_features()),
      flags_(common_flags()) {
  initialize_llvm_once();
  identity_ = fmt::format("{}; triple={}; cpu={}; features={}; flags={}; shim={}",
                          clang::getClangFullVersion(), triple_, cpu_, join(features_, ','),
                          join(flags_, ' '), kMmMallocShim);
}

std::string CpuCompiler::identity_for_march(const std::string& march) const {
  if (march.empty()) return identity_;
  return fmt::format("{}; triple={}; march={}; flags={}; shim={}", clang::getClangFullVersion(),
                     triple_, march, join(flags_, ' '), kMmMallocShim);
}

// Host: the CPU name plus every detected feature, as the driver does for -march=native (the
// name alone would claim features a VM or the OS may hide). Otherwise the named CPU's
// features, as for -march=<name>.
std::vector<std::string> CpuCompiler::compile_args(const CpuSource& src,
                                                   const std::string& main_path) const {
  std::vector<std::string> args = flags_;
  args.insert(args.end(), {"-triple", triple_, "-target-cpu", src.march.empty() ? cpu_ : src.march});
  if (src.march.empty())
    for (const auto& f : features_) args.insert(args.end(), {"-target-feature", f});
  if (!resource_dir_.empty())
    args.insert(args.end(), {"-resource-dir", resource_dir_, "-internal-isystem",
                             resource_dir_ + "/include"});
  args.insert(args.end(), {"-I", fmt::format("{}/include", kVirtualRoot), "-x", "c++", main_path});
  return args;
}

std::vector<uint8_t> CpuCompiler::compile(const CpuSource& src) const {
  std::string main_path = fmt::format("{}/{}", kVirtualRoot, sanitized_file_name(src.name));
  llvm::IntrusiveRefCntPtr<llvm::vfs::FileSystem> files = make_file_system(src, main_path);
  std::string log;
  llvm::SmallVector<char, 0> object;
  bool ok = run_clang(compile_args(src, main_path), files, object, log);
  if (!ok || object.empty())
    throw CompileError(fmt::format("clang could not compile {} for {} ({}):\n{}", src.name,
                                   src.march.empty() ? cpu_ : src.march, triple_,
                                   first_lines(log, kDiagnosticLines)));
  return std::vector<uint8_t>(object.begin(), object.end());
}

}  // namespace ejk::jit
