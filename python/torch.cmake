# libejk_torch.so: the ops as PyTorch custom ops (src/ejk_torch.cpp) on the LibTorch stable ABI.
# EJK_BUILD_TORCH=ON needs torch >= 2.10 in the interpreter; AUTO builds it when that torch
# imports and says why not otherwise (pip's build environment has torch only without build
# isolation). Headers and libtorch_cpu come from that torch, or EJK_TORCH_INCLUDE_DIR and
# EJK_TORCH_CPU_LIBRARY. Built with TORCH_TARGET_VERSION, so only the stable surface compiles
# (any ATen or c10 header is an #error) and the binary runs on torch 2.10 and later.
set(_ejk_torch_min 2.10)
# Kept once found, like the JAX headers: a later configure with another interpreter (the JAX
# tests' venv) still builds against this torch. Asked again when its files are gone.
if(NOT EJK_TORCH_INCLUDE_DIR OR NOT EXISTS "${EJK_TORCH_INCLUDE_DIR}/torch/csrc/stable/library.h"
   OR NOT EXISTS "${EJK_TORCH_CPU_LIBRARY}")
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import os, torch; d = os.path.dirname(torch.__file__); print(torch.__version__.split('+')[0]); print(os.path.join(d, 'include')); print(os.path.join(d, 'lib', 'libtorch_cpu.so'))"
    OUTPUT_VARIABLE _ejk_torch_out OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_VARIABLE _ejk_torch_err RESULT_VARIABLE _ejk_torch_rc)
  if(_ejk_torch_rc)
    set(_ejk_torch_why "torch does not import in ${Python3_EXECUTABLE}")
  else()
    string(REPLACE "\n" ";" _ejk_torch_out "${_ejk_torch_out}")
    list(GET _ejk_torch_out 0 _ejk_torch_version)
    if(_ejk_torch_version VERSION_LESS _ejk_torch_min)
      set(_ejk_torch_why "torch ${_ejk_torch_version} in ${Python3_EXECUTABLE} is older than ${_ejk_torch_min}")
    else()
      list(GET _ejk_torch_out 1 _ejk_torch_include)
      list(GET _ejk_torch_out 2 _ejk_torch_cpu)
      set(EJK_TORCH_INCLUDE_DIR ${_ejk_torch_include} CACHE PATH "torch's include directory (stable ABI headers)" FORCE)
      set(EJK_TORCH_CPU_LIBRARY ${_ejk_torch_cpu} CACHE FILEPATH "torch's libtorch_cpu.so (the C shim)" FORCE)
    endif()
  endif()
  if(_ejk_torch_why)
    if(EJK_BUILD_TORCH STREQUAL "AUTO")
      message(STATUS "ejk: no PyTorch ops (libejk_torch): ${_ejk_torch_why}")
      return()
    endif()
    message(FATAL_ERROR "ejk: EJK_BUILD_TORCH needs torch >= ${_ejk_torch_min} in ${Python3_EXECUTABLE}, or "
                        "-DEJK_TORCH_INCLUDE_DIR and -DEJK_TORCH_CPU_LIBRARY: ${_ejk_torch_why}\n${_ejk_torch_err}")
  endif()
endif()
message(STATUS "ejk: PyTorch ops with the stable ABI headers of ${EJK_TORCH_INCLUDE_DIR}")

add_library(ejk_torch SHARED src/ejk_torch.cpp)
target_include_directories(ejk_torch SYSTEM PRIVATE ${EJK_TORCH_INCLUDE_DIR})
# 2.10: the first release with torch_parallel_for and the versioned torch_library_impl.
target_compile_definitions(ejk_torch PRIVATE TORCH_TARGET_VERSION=0x020a000000000000)
# The shim's functions are libtorch_cpu's; torch has loaded it before torch.ops.load_library, and
# the loader matches DT_NEEDED libtorch_cpu.so to that copy by its soname. libtorch_cuda's one
# function (the current stream) is looked up at run time: a CPU-only torch has no libtorch_cuda.
target_link_libraries(ejk_torch PRIVATE ${EJK_TORCH_CPU_LIBRARY} ${CMAKE_DL_LIBS})
ejk_python_library(ejk_torch ${CMAKE_CURRENT_SOURCE_DIR}/ejk_torch.map)
