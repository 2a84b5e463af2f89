// Shared by the C ABI's functions: descriptors to views, versioned structs, and the boundary
// that turns every exception into a status and ejk_last_error().
#pragma once
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "ejk/c_types.h"
#include "ejk/op.h"
#include "ejk/tensor.h"
#include "ejk/types.h"

namespace ejk::capi {

TensorView to_view(const ejk_tensor& t, const char* name);
Context to_context(const ejk_context* ctx, CpuExecutor& executor);
// A C argument array as Args; `caller` names the function in errors.
Args to_args(const ejk_arg* args, int32_t num_args, const char* caller);

// Copies a caller's versioned struct (struct_size first) into `out`, which holds the defaults.
// struct_size must be the size of a version this library knows (ours, or an older one in
// `older`, whose missing fields keep their defaults): any other size could make the library
// read past the caller's struct.
void read_versioned(const void* in, void* out, size_t ours, const char* name,
                    std::initializer_list<size_t> older = {});

void set_last_error(std::string message);
const char* last_error();

// Sets ejk_last_error() from the exception in flight and returns its status.
int status_of_current_exception();

template <class F>
int guarded(F&& f) {
  try {
    std::forward<F>(f)();
    set_last_error({});
    return EJK_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

}  // namespace ejk::capi
