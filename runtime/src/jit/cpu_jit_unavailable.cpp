// CpuCompiler and CpuLoader in a build without EJK_ENABLE_ORC_JIT: the same interface, so the
// runtime links either way and asks available() instead of using #ifdefs; every entry point
// says why the CPU JIT is missing.
#include <fmt/format.h>

#include "ejk/core/error.h"
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"

namespace ejk::jit {
namespace {

[[noreturn]] void throw_unavailable(const char* what) {
  throw BackendUnavailable(fmt::format(
      "CPU JIT ({}): this build has no LLVM ORC JIT (configured with EJK_ENABLE_ORC_JIT=OFF); "
      "only CPU variants built into the library can run",
      what));
}

}  // namespace

bool CpuCompiler::available() { return false; }

std::string CpuCompiler::unavailable_reason() {
  return "this build has no LLVM ORC JIT (configured with EJK_ENABLE_ORC_JIT=OFF)";
}

CpuCompiler& CpuCompiler::instance() { throw_unavailable("CpuCompiler::instance"); }

CpuCompiler::CpuCompiler() { throw_unavailable("CpuCompiler"); }

std::string CpuCompiler::identity_for_march(const std::string&) const {
  throw_unavailable("CpuCompiler::identity_for_march");
}

std::vector<uint8_t> CpuCompiler::compile(const CpuSource&) const {
  throw_unavailable("CpuCompiler::compile");
}

struct CpuLoader::Impl {};

CpuLoader& CpuLoader::instance() { throw_unavailable("CpuLoader::instance"); }

CpuLoader::CpuLoader() { throw_unavailable("CpuLoader"); }

CpuLoader::~CpuLoader() = default;

void* CpuLoader::load(std::span<const uint8_t>, const std::string&) {
  throw_unavailable("CpuLoader::load");
}

}  // namespace ejk::jit
