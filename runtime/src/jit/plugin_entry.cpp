// The plugin's one exported function: the CpuCompiler and CpuLoader of this library (Clang and
// ORC) behind plugin_abi.h's C table. Exceptions become a status and a message here, and the
// client in libejk throws them again as its own types.
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "ejk/core/error.h"
#include "jit/cpu_compiler.h"
#include "jit/cpu_loader.h"
#include "jit/plugin_abi.h"

namespace ejk::jit {
namespace {

void send(ejk_jit_sink sink, void* ctx, const std::string& text) { sink(ctx, text.data(), text.size()); }

// Runs `body`; a thrown exception goes to the sink with the status of its type.
template <class Body>
int guarded(ejk_jit_sink sink, void* ctx, Body&& body) {
  try {
    body();
    return EJK_JIT_OK;
  } catch (const InvalidArgument& e) {
    send(sink, ctx, e.what());
    return EJK_JIT_INVALID_ARGUMENT;
  } catch (const CompileError& e) {
    send(sink, ctx, e.what());
    return EJK_JIT_COMPILE_ERROR;
  } catch (const BackendUnavailable& e) {
    send(sink, ctx, e.what());
    return EJK_JIT_UNAVAILABLE;
  } catch (const std::exception& e) {
    send(sink, ctx, e.what());
    return EJK_JIT_INTERNAL;
  } catch (...) {
    send(sink, ctx, "unknown exception in the CPU JIT plugin");
    return EJK_JIT_INTERNAL;
  }
}

std::string join_features(const std::vector<std::string>& features) {
  std::string out;
  for (const auto& f : features) out += (out.empty() ? "" : ",") + f;
  return out;
}

int fact(int which, ejk_jit_sink sink, void* ctx) {
  return guarded(sink, ctx, [&] {
    const CpuCompiler& c = CpuCompiler::instance();
    switch (which) {
      case EJK_JIT_FACT_IDENTITY: return send(sink, ctx, c.identity());
      case EJK_JIT_FACT_HOST_CPU: return send(sink, ctx, c.host_cpu());
      case EJK_JIT_FACT_TRIPLE: return send(sink, ctx, c.target_triple());
      case EJK_JIT_FACT_FEATURES: return send(sink, ctx, join_features(c.host_features()));
      default: throw InvalidArgument("CPU JIT plugin: unknown fact " + std::to_string(which));
    }
  });
}

int identity_for_march(const char* march, ejk_jit_sink sink, void* ctx) {
  return guarded(sink, ctx, [&] { send(sink, ctx, CpuCompiler::instance().identity_for_march(march)); });
}

CpuSource to_source(const ejk_jit_source& s) {
  CpuSource out{s.name, std::string(s.text, s.text_size), {}, s.march};
  out.headers.reserve(s.num_headers);
  for (size_t i = 0; i < s.num_headers; ++i)
    out.headers.emplace_back(s.headers[i].path, std::string(s.headers[i].text, s.headers[i].text_size));
  return out;
}

int compile(const ejk_jit_source* src, ejk_jit_sink sink, void* ctx) {
  return guarded(sink, ctx, [&] {
    const std::vector<uint8_t> object = CpuCompiler::instance().compile(to_source(*src));
    sink(ctx, reinterpret_cast<const char*>(object.data()), object.size());
  });
}

int load(const uint8_t* object, size_t size, const char* symbol, void** address, ejk_jit_sink sink,
         void* ctx) {
  return guarded(sink, ctx, [&] { *address = CpuLoader::instance().load({object, size}, symbol); });
}

constexpr ejk_cpu_jit_plugin kPlugin{EJK_CPU_JIT_PLUGIN_ABI, fact, identity_for_march, compile, load};

}  // namespace
}  // namespace ejk::jit

extern "C" __attribute__((visibility("default"))) const ejk_cpu_jit_plugin* ejk_cpu_jit_plugin_v1() {
  return &ejk::jit::kPlugin;
}
