# ejk_cpu_jit: in-process clang (source -> object) and the ORC LLJIT loader (object -> symbol).
# Included from runtime/CMakeLists.txt after cache.cmake (the loader uses util/hash from
# ejk_cache). With EJK_ENABLE_ORC_JIT=OFF the same target exists with an implementation whose
# CpuCompiler::available() is false, so the runtime links the same way in both builds.
set(_ejk_runtime_src "${CMAKE_CURRENT_LIST_DIR}/..")

if(EJK_ENABLE_ORC_JIT)
  add_library(ejk_cpu_jit STATIC
    ${CMAKE_CURRENT_LIST_DIR}/cpu_compiler.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cpu_loader.cpp)
  # SYSTEM: LLVM's headers are not ours to warn about.
  target_include_directories(ejk_cpu_jit SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS} ${CLANG_INCLUDE_DIRS})
  separate_arguments(_ejk_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
  target_compile_definitions(ejk_cpu_jit PRIVATE
    ${_ejk_llvm_defs}
    EJK_CLANG_RESOURCE_DIR="${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}")
  # The shared libraries only: Debian's static clang archives together with LLVM components
  # link LLVM twice ("Option ... registered more than once" at start-up).
  target_link_libraries(ejk_cpu_jit PRIVATE clang-cpp LLVM)
  target_compile_definitions(ejk_cpu_jit PUBLIC EJK_HAVE_ORC_JIT=1)
else()
  add_library(ejk_cpu_jit STATIC ${CMAKE_CURRENT_LIST_DIR}/cpu_jit_unavailable.cpp)
  target_compile_definitions(ejk_cpu_jit PUBLIC EJK_HAVE_ORC_JIT=0)
endif()
target_include_directories(ejk_cpu_jit PUBLIC ${_ejk_runtime_src})
target_link_libraries(ejk_cpu_jit PUBLIC ejk_core PRIVATE ejk_cache fmt::fmt)
