# ejk_cache: the on-disk cache of compiled variants, the checks of what it may load, and the
# runtime's small utilities (content hashes, strict environment parsing).
# Included from runtime/CMakeLists.txt; paths are relative to this file so the include site
# does not matter.
set(_ejk_runtime_src "${CMAKE_CURRENT_LIST_DIR}/..")

add_library(ejk_cache STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cache_listing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/disk_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/elf_reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entry_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entry_lock.cpp
  ${CMAKE_CURRENT_LIST_DIR}/entry_names.cpp
  ${CMAKE_CURRENT_LIST_DIR}/get_or_build.cpp
  ${CMAKE_CURRENT_LIST_DIR}/payload_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/posix_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/temp_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trust.cpp
  ${_ejk_runtime_src}/util/env.cpp
  ${_ejk_runtime_src}/util/hash.cpp)
# Headers are included as "cache/disk_cache.h", "util/hash.h" and "util/env.h".
target_include_directories(ejk_cache PUBLIC ${_ejk_runtime_src})
# xxhash is compiled inline (XXH_INLINE_ALL in util/hash.cpp): headers only, no libxxhash.
target_include_directories(ejk_cache PRIVATE ${XXHASH_INCLUDE_DIR})
target_link_libraries(ejk_cache PUBLIC ejk_core PRIVATE fmt::fmt)
