# ejk_bundle: the kernel bundle file format (.ejkb), its bounds-checked reader and its writer;
# no engine code, so the tests and the fuzzer link it alone. The rest of bundles (the loaded
# set, lookups, the public API) is part of libejk (runtime/CMakeLists.txt); the builder, above
# the engine, is src/api/bundle_build.cpp.
# Included from runtime/CMakeLists.txt after cache.cmake; paths relative to this file.
add_library(ejk_bundle STATIC
  ${CMAKE_CURRENT_LIST_DIR}/format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/writer.cpp)
target_include_directories(ejk_bundle PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(ejk_bundle PUBLIC ejk_cache PRIVATE zstd::libzstd_shared fmt::fmt)
