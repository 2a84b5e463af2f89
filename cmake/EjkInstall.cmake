# `cmake --install <build> --prefix P`: libejk (and the CPU JIT plugin beside it, when built),
# the public headers, the ejk and ejk-gen executables, the specs, templates and kernel headers
# that a program's own generation reads (share/ejkernel/), and the CMake package
# (lib/cmake/ejkernel/: find_package(ejkernel) gives ejkernel::ejk and ejk_generate_kernels).
# Included last by the top-level CMakeLists. Design: docs/design/packaging.md.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EJK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ejkernel)
set(EJK_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/ejkernel)

# Run paths relative to the installed files, so the prefix can move. Everything else libejk
# needs (fmt, yaml-cpp; LLVM for the JIT plugin) is a system library.
set_target_properties(ejk PROPERTIES INSTALL_RPATH "$ORIGIN")
set_target_properties(ejk_cli ejk-gen PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS ejk LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET ejk_cpu_jit_plugin)  # libejk loads it from its own directory
  set_target_properties(ejk_cpu_jit_plugin PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS ejk_cpu_jit_plugin LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS ejk_cli ejk-gen RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The public headers, and of core's only error.h: the exception types a caller catches.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/ejk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${EJK_GEN_API_INCLUDE_DIR}/ejk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})  # ejk/ops/*.h, generated
install(FILES ${PROJECT_SOURCE_DIR}/core/include/ejk/core/error.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ejk/core)

# The inputs of ejk_generate_kernels: libejk refuses variants generated from other kernel headers
# or templates than those it embeds, so these are the very files the library was built from.
install(DIRECTORY ${EJK_SPECS_DIR} ${EJK_TEMPLATES_DIR} ${EJK_KERNELS_DIR} DESTINATION ${EJK_INSTALL_DATADIR}
        PATTERN ".*" EXCLUDE)

set(EJK_LIBRARY_FILE ${CMAKE_SHARED_LIBRARY_PREFIX}ejk${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION})
set(EJK_LIBRARY_SONAME ${CMAKE_SHARED_LIBRARY_PREFIX}ejk${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION_MAJOR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ejkernelConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/ejkernelConfig.cmake
  INSTALL_DESTINATION ${EJK_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR EJK_INSTALL_DATADIR)
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/ejkernelConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/ejkernelConfig.cmake
              ${CMAKE_BINARY_DIR}/package/ejkernelConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/EjkKernels.cmake
              ${CMAKE_CURRENT_LIST_DIR}/EjkGenRules.cmake
        DESTINATION ${EJK_INSTALL_CMAKEDIR})
