// Memory on the devices a TensorView may live on: allocation and copies, dispatched on the
// device kind. The CPU case is plain memory; CUDA goes through the dlopen'd driver, so a build
// without CUDA (or a machine without a driver) reports BackendUnavailable with the reason.
#pragma once
#include <cstddef>
#include <string>

#include "ejk/tensor.h"

namespace ejk::detail {

void* device_alloc(Device d, size_t bytes);
void device_free(Device d, void* p) noexcept;
void copy_to_host(Device src_device, const void* src, void* dst, size_t bytes);
void copy_from_host(Device dst_device, void* dst, const void* src, size_t bytes);

// Whether CUDA can run here; `why` says why not (no driver, no device, built without CUDA).
bool cuda_usable(std::string* why);

}  // namespace ejk::detail
