# The CPU JIT: in-process clang (source -> object) and the ORC LLJIT loader (object -> symbol).
# Included from runtime/CMakeLists.txt after cache.cmake (the loader uses util/hash from
# ejk_cache).
#
# With EJK_ENABLE_ORC_JIT the JIT is a plugin, libejk_cpu_jit.so (target ejk_cpu_jit_plugin),
# the only binary that links LLVM and Clang; libejk links ejk_cpu_jit, a client that loads the
# plugin on first need, so libejk (and a wheel) runs without LLVM. Without ORC, ejk_cpu_jit is a
# stand-in whose CpuCompiler::available() is false; the runtime links the same way in both.
set(_ejk_runtime_src "${CMAKE_CURRENT_LIST_DIR}/..")

if(EJK_ENABLE_ORC_JIT)
  add_library(ejk_cpu_jit_plugin SHARED
    ${CMAKE_CURRENT_LIST_DIR}/cpu_compiler.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cpu_loader.cpp
    ${CMAKE_CURRENT_LIST_DIR}/plugin_entry.cpp)
  set_target_properties(ejk_cpu_jit_plugin PROPERTIES OUTPUT_NAME ejk_cpu_jit
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  # SYSTEM: LLVM's headers are not ours to warn about.
  target_include_directories(ejk_cpu_jit_plugin SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS} ${CLANG_INCLUDE_DIRS})
  target_include_directories(ejk_cpu_jit_plugin PRIVATE ${_ejk_runtime_src})
  separate_arguments(_ejk_llvm_defs NATIVE_COMMAND "${LLVM_DEFINITIONS}")
  target_compile_definitions(ejk_cpu_jit_plugin PRIVATE
    ${_ejk_llvm_defs}
    EJK_CLANG_RESOURCE_DIR="${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}")
  # The shared libraries only: Debian's static clang archives together with LLVM components
  # link LLVM twice ("Option ... registered more than once" at start-up).
  target_link_libraries(ejk_cpu_jit_plugin PRIVATE clang-cpp LLVM ejk_core ejk_cache fmt::fmt)
  # The entry point is the plugin's only export (plugin_abi.h).
  target_link_options(ejk_cpu_jit_plugin PRIVATE "LINKER:--exclude-libs,ALL"
    "LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/plugin.map")
  if(NOT EJK_SANITIZE)
    target_link_options(ejk_cpu_jit_plugin PRIVATE "LINKER:--no-undefined")
  endif()
  set_property(TARGET ejk_cpu_jit_plugin APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/plugin.map)

  add_library(ejk_cpu_jit STATIC ${CMAKE_CURRENT_LIST_DIR}/cpu_jit_client.cpp)
  target_compile_definitions(ejk_cpu_jit PUBLIC EJK_HAVE_ORC_JIT=1)
  # The plugin is found beside libejk; executables that link the client statically (tests) find
  # it by name through a build-tree run path instead.
  add_dependencies(ejk_cpu_jit ejk_cpu_jit_plugin)
  target_link_options(ejk_cpu_jit INTERFACE
    "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:LINKER:-rpath,$<TARGET_FILE_DIR:ejk_cpu_jit_plugin>>")
else()
  add_library(ejk_cpu_jit STATIC ${CMAKE_CURRENT_LIST_DIR}/cpu_jit_unavailable.cpp)
  target_compile_definitions(ejk_cpu_jit PUBLIC EJK_HAVE_ORC_JIT=0)
endif()
target_include_directories(ejk_cpu_jit PUBLIC ${_ejk_runtime_src})
target_link_libraries(ejk_cpu_jit PUBLIC ejk_core ${CMAKE_DL_LIBS} PRIVATE ejk_cache fmt::fmt)
