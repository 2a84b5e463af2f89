# ejk_cache: the on-disk cache of compiled variants and the content-hash helpers.
# Included from runtime/CMakeLists.txt; paths are relative to this file so the include site
# does not matter.
set(_ejk_runtime_src "${CMAKE_CURRENT_LIST_DIR}/..")

add_library(ejk_cache STATIC
  ${CMAKE_CURRENT_LIST_DIR}/disk_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entry_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entry_lock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/get_or_build.cpp
  ${CMAKE_CURRENT_LIST_DIR}/posix_io.cpp
  ${_ejk_runtime_src}/util/hash.cpp)
# Headers are included as "cache/disk_cache.h" and "util/hash.h".
target_include_directories(ejk_cache PUBLIC ${_ejk_runtime_src})
# xxhash is compiled inline (XXH_INLINE_ALL in util/hash.cpp): headers only, no libxxhash.
target_include_directories(ejk_cache PRIVATE ${XXHASH_INCLUDE_DIR})
target_link_libraries(ejk_cache PUBLIC ejk_core PRIVATE fmt::fmt)
