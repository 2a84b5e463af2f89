#include "cuda_variants.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <mutex>

#include "cache/disk_cache.h"
#include "cache/get_or_build.h"
#include "cuda/cuda_backend.h"
#include "cuda/nvrtc_compiler.h"
#include "ejk/core/error.h"
#include "observer.h"
#include "registry.h"
#include "util/hash.h"

namespace ejk::detail {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const generated::CudaAotEntry* find_cuda_aot(std::string_view key) {
  for (size_t i = 0; i < generated::kNumCudaAot; ++i)
    if (key == generated::kCudaAot[i].key) return &generated::kCudaAot[i];
  return nullptr;
}

// Everything that determines the cubin: source, headers, generator, NVRTC version, arch.
std::string cubin_hash(const std::string& key, const std::string& source, const std::string& arch) {
  const auto& nvrtc = cuda::NvrtcCompiler::get();
  std::vector<std::string_view> parts{"cuda", key, source, generated::kGeneratorVersion, nvrtc.identity(), arch};
  for (const auto& [path, text] : kernel_headers()) {
    parts.push_back(path);
    parts.push_back(text);
  }
  return util::hash_strings_hex(parts);
}

void fill_resources(CudaCubin& c, const std::string& symbol) {
  auto res = cuda::cubin_resources(c.bytes, symbol);
  c.registers = res.registers;
  c.static_shared_bytes = res.static_smem_bytes;
}

}  // namespace

CudaCubin acquire_cuda_cubin(const OpSchema& schema, const VariantKey& key) {
  std::string k = to_string(key);
  std::string symbol = symbol_name(key);
  CudaCubin out;
  if (const auto* aot = find_cuda_aot(k)) {
    out.bytes.assign(aot->image, aot->image + aot->size);
    fill_resources(out, symbol);
    return out;
  }
  std::string arch = cuda::nvrtc_arch(key.target);
  std::string source = render_source(schema, key);
  std::string hash = cubin_hash(k, source, arch);
  static cache::DiskCache disk;
  auto t0 = std::chrono::steady_clock::now();
  auto built = cache::get_or_build(disk, "cuda", k, hash, [&] {
    CompileNotice notice(k);
    return cuda::NvrtcCompiler::get().compile({k + ".cu", source, kernel_headers()}, arch, symbol).cubin;
  });
  out.bytes = std::move(built.bytes);
  bool hit = built.source == cache::Source::Cache;
  out.source = hit ? VariantSource::cache : VariantSource::jit;
  out.compile_ms = built.build_ms;
  out.load_ms = hit ? ms_since(t0) : 0;
  out.cache_path = disk.entry_path("cuda", k, hash).string();
  fill_resources(out, symbol);
  return out;
}

CudaVariant acquire_cuda_variant(const OpSchema& schema, const VariantKey& key, int ordinal) {
  static std::mutex mu;
  static std::map<std::pair<int, std::string>, CudaVariant> loaded;
  auto id = std::make_pair(ordinal, to_string(key));
  {
    std::lock_guard lk(mu);
    if (auto it = loaded.find(id); it != loaded.end()) return it->second;
  }
  CudaCubin cubin = acquire_cuda_cubin(schema, key);
  cuda::use_device(ordinal);
  auto t0 = std::chrono::steady_clock::now();
  CudaVariant v;
  v.kernel = std::make_shared<cuda::LoadedKernel>(cubin.bytes, symbol_name(key));
  v.source = cubin.source;
  v.compile_ms = cubin.compile_ms;
  v.load_ms = cubin.load_ms + ms_since(t0);
  std::lock_guard lk(mu);
  return loaded.emplace(id, v).first->second;
}

VariantKey bias_rows_key(std::string_view target) {
  VariantKey key = op_schema("flash_fwd_bias_rows").blank_key("cuda", target);
  key.set_enum("elem", "b16");  // bf16 and f16 alike: the copy moves bits
  return key;
}

}  // namespace ejk::detail
