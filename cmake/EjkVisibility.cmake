# Symbol visibility of libejk. With EJK_HIDE_SYMBOLS, libejk exports only declarations marked
# EJK_API (runtime/include/ejk/export.h), filtered by the version script cmake/ejk.map. Loaded
# into a process that carries its own copies of libstdc++'s templates, fmt or LLVM (PyTorch,
# jaxlib), an exported std:: instantiation binds one side to the other's copy: that crashed.
# tests/build/test_exports.sh checks the result.
#
# ejk_hide_symbols(target): builds the shared library `target` that way, and compiles the
# project's static and object libraries linked into it hidden too (their objects become part
# of it).

option(EJK_HIDE_SYMBOLS "libejk exports only EJK_API declarations (hidden visibility, version script)" ON)
set(EJK_EXPORT_MAP ${CMAKE_CURRENT_LIST_DIR}/ejk.map)

function(_ejk_compile_hidden target)
  set_target_properties(${target} PROPERTIES C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                                             VISIBILITY_INLINES_HIDDEN ON)
endfunction()

# Non-imported static and object libraries that `target` links, directly or through others.
function(_ejk_static_link_deps target out)
  set(found)
  set(pending ${target})
  while(pending)
    list(POP_FRONT pending t)
    get_target_property(direct ${t} LINK_LIBRARIES)
    get_target_property(interface ${t} INTERFACE_LINK_LIBRARIES)
    foreach(lib IN LISTS direct interface)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
      if(NOT TARGET "${lib}")
        continue()
      endif()
      get_target_property(aliased ${lib} ALIASED_TARGET)
      if(aliased)
        set(lib ${aliased})
      endif()
      get_target_property(imported ${lib} IMPORTED)
      get_target_property(type ${lib} TYPE)
      if(imported OR NOT type MATCHES "^(STATIC|OBJECT)_LIBRARY$" OR lib IN_LIST found)
        continue()
      endif()
      list(APPEND found ${lib})
      list(APPEND pending ${lib})
    endforeach()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

function(_ejk_hide_static_link_deps target)
  _ejk_static_link_deps(${target} libs)
  foreach(lib IN LISTS libs)
    _ejk_compile_hidden(${lib})
  endforeach()
  message(STATUS "ejk: ${target} exports EJK_API only; compiled hidden with it: ${libs}")
endfunction()

function(ejk_hide_symbols target)
  if(NOT EJK_HIDE_SYMBOLS)
    return()
  endif()
  _ejk_compile_hidden(${target})
  # --exclude-libs: nothing from a static archive is exported, whatever its own flags were.
  target_link_options(${target} PRIVATE "LINKER:--exclude-libs,ALL"
                                        "LINKER:--version-script=${EJK_EXPORT_MAP}")
  # Sanitizer runtimes may come with the executable only (clang links them there), so a
  # sanitized library has undefined symbols by design.
  if(NOT EJK_SANITIZE)
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${EJK_EXPORT_MAP})
  # Deferred to the end of the top-level directory, so that libraries linked after this call
  # are found too. EVAL: a deferred call reads its arguments' variables when it runs.
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]]
                                           CALL _ejk_hide_static_link_deps [[${target}]])")
endfunction()
