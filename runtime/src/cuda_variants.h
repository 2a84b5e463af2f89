// CUDA variants as cubins: AOT table → disk cache → NVRTC, for any arch without a GPU
// (`ejk compile`), and loaded into a device's context for launches.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ejk/core/schema.h"
#include "ejk/flash_attention.h"

namespace ejk::cuda {
class LoadedKernel;
}

namespace ejk::detail {

struct CudaCubin {
  std::vector<uint8_t> bytes;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0, load_ms = 0;
  std::string cache_path;  // JIT-built cubins
  int registers = -1;
  int64_t static_shared_bytes = -1;  // of the entry; the dynamic part comes at launch
};

// The cubin of `key` (its target names the arch). Needs NVRTC on a miss, no GPU.
CudaCubin acquire_cuda_cubin(const OpSchema& schema, const VariantKey& key);

struct CudaVariant {
  std::shared_ptr<cuda::LoadedKernel> kernel;
  VariantSource source = VariantSource::aot;
  double compile_ms = 0, load_ms = 0;
};

// The kernel of `key` loaded on device `ordinal` (memoized per device and key).
CudaVariant acquire_cuda_variant(const OpSchema& schema, const VariantKey& key, int ordinal);

// The bias copy's key for a CUDA target (specs/flash_fwd_bias_rows.yaml): one kernel per arch
// serves every bias key of flash_fwd, so their JIT compiles do not carry it.
VariantKey bias_rows_key(std::string_view target);

}  // namespace ejk::detail
