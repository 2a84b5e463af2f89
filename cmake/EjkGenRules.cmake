# Rules shared by the library's own generation (cmake/EjkGenerate.cmake) and a program's
# (ejk_generate_kernels, cmake/EjkKernels.cmake): asking ejk-gen for its outputs when CMake
# configures, compiling CPU variants with their target's flags, and the build step that runs
# ejk-gen. Installed with the package, so both sides compile variants the same way.

# Runs the generator `gen` (a path: it must exist while CMake configures) with the remaining
# arguments and --cmake-manifest `manifest`, then includes the manifest: EJK_GEN_VERSION,
# EJK_GEN_REGISTRY, EJK_GEN_GROUPS and EJK_GEN_GROUP_<group>_{BACKEND,FLAGS,KEYS,SOURCES} are
# set in the caller's scope. A macro for that reason.
macro(ejk_gen_read_manifest gen manifest)
  execute_process(COMMAND ${gen} ${ARGN} --cmake-manifest ${manifest}
                  RESULT_VARIABLE _ejk_gen_rc ERROR_VARIABLE _ejk_gen_err)
  if(_ejk_gen_rc)
    message(FATAL_ERROR "ejk: ejk-gen could not list the generated files:\n${_ejk_gen_err}")
  endif()
  include(${manifest})
endmacro()

# The CPU sources of the manifest read last, into `out_var`, each set to compile with its
# target's flags from the spec, then -O3 whatever the build type (these are the kernels), then
# EXTRA_FLAGS. No exceptions or RTTI, as the JIT compiles them: freestanding kernels use neither,
# and a personality reference would be one more weak symbol shared across targets.
function(ejk_gen_cpu_sources out_var)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "EXTRA_FLAGS")
  set(sources)
  foreach(group IN LISTS EJK_GEN_GROUPS)
    if(EJK_GEN_GROUP_${group}_BACKEND STREQUAL "cpu")
      list(APPEND sources ${EJK_GEN_GROUP_${group}_SOURCES})
      set_source_files_properties(${EJK_GEN_GROUP_${group}_SOURCES} PROPERTIES COMPILE_OPTIONS
        "${EJK_GEN_GROUP_${group}_FLAGS};-O3;-fno-exceptions;-fno-rtti;${arg_EXTRA_FLAGS}")
    endif()
  endforeach()
  set(${out_var} ${sources} PARENT_SCOPE)
endfunction()

# A build step that runs COMMAND (an ejk-gen command line) and then touches `stamp`. The stamp
# makes the step run only when one of DEPENDS changed; the generated files are BYPRODUCTS, and
# those ejk-gen leaves untouched (same content) keep their mtimes, so nothing downstream
# recompiles.
function(ejk_gen_add_step stamp)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "COMMENT" "COMMAND;BYPRODUCTS;DEPENDS")
  add_custom_command(
    OUTPUT ${stamp}
    BYPRODUCTS ${arg_BYPRODUCTS}
    COMMAND ${arg_COMMAND}
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${arg_DEPENDS}
    COMMENT "${arg_COMMENT}"
    VERBATIM)
endfunction()
