// CpuLoader on LLVM 19 ORC: one LLJIT, one JITDylib per loaded object, process symbols
// through a DynamicLibrarySearchGenerator.
#include "jit/cpu_loader.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "ejk/core/error.h"
#include "util/hash.h"

namespace ejk::jit {
namespace orc = llvm::orc;
namespace {

// The process's own symbols (libc, libm: memcpy, expf) in a JITDylib that every object's
// JITDylib links against.
llvm::Expected<orc::JITDylibSP> setup_process_symbols(orc::LLJIT& jit) {
  auto& jd = jit.getExecutionSession().createBareJITDylib("<ejk process>");
  auto generator = orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      jit.getDataLayout().getGlobalPrefix());
  if (!generator) return generator.takeError();
  jd.addGenerator(std::move(*generator));
  return &jd;
}

// Static constructors would need an ORC platform runtime to run; without it they would be
// silently skipped and the kernel would see uninitialized globals.
std::string find_static_constructors(llvm::MemoryBufferRef buffer) {
  auto object = llvm::object::ObjectFile::createObjectFile(buffer);
  if (!object) return "not an object file: " + llvm::toString(object.takeError());
  for (const auto& section : (*object)->sections()) {
    auto name = section.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    bool ctor_section = name->starts_with(".init_array") || name->starts_with(".ctors");
    if (ctor_section && section.getSize() > 0)
      return fmt::format("has static constructors (section {})", name->str());
  }
  return {};
}

}  // namespace

struct CpuLoader::Impl {
  std::unique_ptr<orc::LLJIT> jit;
  std::mutex mutex;  // guards `loaded` and `next_id`; held while linking
  std::unordered_map<std::string, void*> loaded;  // object hash + symbol -> address
  uint64_t next_id = 0;
  // Errors ORC reports out of band (by default it prints them). A separate mutex because
  // the reporter may run on the linking thread while `mutex` is held.
  std::mutex report_mutex;
  std::string reported;

  std::string take_reported();

  void* link(std::span<const uint8_t> object, const std::string& symbol);
};

CpuLoader& CpuLoader::instance() {
  // Never destroyed: JIT code must stay mapped while any thread (a pool worker during exit,
  // say) may still run it, and unmapping at exit gains nothing. Thread-safe construction.
  static CpuLoader* loader = new CpuLoader();
  return *loader;
}

CpuLoader::CpuLoader() : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jit = orc::LLJITBuilder()
                 .setProcessSymbolsJITDylibSetup(setup_process_symbols)
                 // Objects only, no IR: the generic IR platform's initializer support is unused.
                 .setPlatformSetUp(orc::setUpInactivePlatform)
                 .create();
  if (!jit)
    throw BackendUnavailable(
        fmt::format("CPU JIT: cannot create LLVM ORC LLJIT for this host: {}",
                    llvm::toString(jit.takeError())));
  impl_->jit = std::move(*jit);
  Impl* impl = impl_.get();
  impl_->jit->getExecutionSession().setErrorReporter([impl](llvm::Error error) {
    std::string text = llvm::toString(std::move(error));
    std::lock_guard<std::mutex> guard(impl->report_mutex);
    impl->reported += text + "\n";
  });
}

CpuLoader::~CpuLoader() = default;

void* CpuLoader::load(std::span<const uint8_t> object, const std::string& symbol) {
  if (object.empty())
    throw InvalidArgument(fmt::format("CpuLoader::load of {}: object is empty (expected ELF bytes)",
                                      symbol));
  if (symbol.empty())
    throw InvalidArgument("CpuLoader::load: symbol is empty (expected the kernel's entry point)");
  std::string memo_key = util::xxh3_128_hex(object) + '\0' + symbol;
  std::lock_guard<std::mutex> guard(impl_->mutex);
  if (auto it = impl_->loaded.find(memo_key); it != impl_->loaded.end()) return it->second;
  void* address = impl_->link(object, symbol);
  impl_->loaded.emplace(std::move(memo_key), address);
  return address;
}

std::string CpuLoader::Impl::take_reported() {
  std::lock_guard<std::mutex> guard(report_mutex);
  return std::exchange(reported, std::string());
}

// Called with `mutex` held.
void* CpuLoader::Impl::link(std::span<const uint8_t> object, const std::string& symbol) {
  std::string_view bytes(reinterpret_cast<const char*>(object.data()), object.size());
  std::string buffer_name = fmt::format("ejk-object-{}", next_id);
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(bytes, buffer_name);
  if (std::string problem = find_static_constructors(buffer->getMemBufferRef()); !problem.empty())
    throw CompileError(fmt::format("CPU JIT: object for {} {}", symbol, problem));

  auto dylib = jit->createJITDylib(fmt::format("ejk-kernel-{}", next_id++));
  if (!dylib)
    throw CompileError(fmt::format("CPU JIT: cannot create a JITDylib for {}: {}", symbol,
                                   llvm::toString(dylib.takeError())));
  orc::JITDylib& jd = *dylib;
  auto fail = [&](llvm::Error error) -> CompileError {
    std::string text = llvm::toString(std::move(error));
    if (std::string more = take_reported(); !more.empty()) text += "\n" + more;
    llvm::consumeError(jit->getExecutionSession().removeJITDylib(jd));
    return CompileError(fmt::format("CPU JIT: cannot link {}: {}", symbol, text));
  };
  if (llvm::Error error = jit->addObjectFile(jd, std::move(buffer))) throw fail(std::move(error));
  // The lookup is what links: relocations are resolved and memory is finalized here.
  auto address = jit->lookup(jd, symbol);
  if (!address) throw fail(address.takeError());
  return address->toPtr<void*>();
}

}  // namespace ejk::jit
