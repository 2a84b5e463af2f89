# The functions a program's build calls (installed with the package; ejkernelConfig.cmake
# includes this file):
#
#   ejk_generate_kernels(TARGET <target> [SPECS <file.yaml>...] [VARIANTS <regex> | KEYS <key>...]
#                        [BACKENDS cpu] [TARGETS <cpu target>...])
#     Generates CPU variants at build time and compiles them into <target> (an executable or
#     shared library), which registers them with libejk as it loads: calls find them as built-in
#     variants (RunInfo source "aot"). SPECS: the specs to generate from (default: the installed
#     ones); VARIANTS: a regex over their AOT sets; KEYS: exact keys instead, any the spec accepts
#     (e.g. a head_dim the library does not pre-build); TARGETS: keep only these CPU targets.
#
#   ejk_add_kernel_bundle(NAME <name> OUTPUT <file> [VARIANTS <regex>] [KEYS <key>...]
#                         [BACKEND cpu|cuda] [ARCH <arch>...])
#     A target <name>, built by default, that writes the bundle <file> with the installed
#     `ejk bundle build`: VARIANTS filters the specs' AOT sets, KEYS adds exact keys; ARCH: CPU
#     targets (default the build machine's) or CUDA archs (sm_90a, ...; no GPU needed). CPU
#     entries are compiled by the package's JIT (EJKERNEL_HAS_ORC_JIT), CUDA ones by NVRTC. A
#     program registers the file with ejk::load_bundle or EJK_BUNDLE_PATH.
#
# They read, from the package (or a build tree that sets them): EJKERNEL_GEN_EXECUTABLE (ejk-gen,
# runnable while CMake configures), EJKERNEL_GEN_COMMAND (what the build runs: a target or path),
# EJKERNEL_CLI_COMMAND (the ejk CLI), EJKERNEL_LIBRARY (the target to link),
# EJKERNEL_{SPECS,TEMPLATES,KERNELS}_DIR.
include(${CMAKE_CURRENT_LIST_DIR}/EjkGenRules.cmake)

# Copies `specs` into `dir` (and removes copies of specs no longer listed). configure_file makes
# CMake configure again when one changes, so the list of generated files follows the specs.
function(_ejk_stage_specs dir)
  file(GLOB old ${dir}/*.yaml)
  set(kept)
  foreach(spec IN LISTS ARGN)
    get_filename_component(name ${spec} NAME)
    configure_file(${spec} ${dir}/${name} COPYONLY)
    list(APPEND kept ${dir}/${name})
  endforeach()
  list(REMOVE_ITEM old ${kept})
  if(old)
    file(REMOVE ${old})
  endif()
endfunction()

# The ejk-gen arguments of a call (see ejk_generate_kernels), into `out_var`.
function(_ejk_kernels_gen_args out_var specs_dir out_dir)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "VARIANTS" "KEYS;TARGETS")
  set(args --specs ${specs_dir} --templates ${EJKERNEL_TEMPLATES_DIR} --kernels ${EJKERNEL_KERNELS_DIR}
           --out ${out_dir} --backends cpu --registry user)
  if(DEFINED arg_VARIANTS AND arg_KEYS)
    message(FATAL_ERROR "ejk_generate_kernels: VARIANTS and KEYS exclude each other")
  elseif(DEFINED arg_VARIANTS)
    list(APPEND args --variants ${arg_VARIANTS})
  elseif(arg_KEYS)
    list(JOIN arg_KEYS "," keys)
    list(APPEND args --keys ${keys})
  endif()
  if(arg_TARGETS)
    list(JOIN arg_TARGETS "," targets)
    list(APPEND args --targets cpu=${targets})
  endif()
  set(${out_var} ${args} PARENT_SCOPE)
endfunction()

function(ejk_generate_kernels)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TARGET;VARIANTS" "SPECS;KEYS;BACKENDS;TARGETS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ejk_generate_kernels: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TARGET "${arg_TARGET}")
    message(FATAL_ERROR "ejk_generate_kernels: TARGET '${arg_TARGET}' is not a target")
  endif()
  set(t ${arg_TARGET})
  # A static library's registration object would be dropped by the linker: nothing refers to it.
  get_target_property(type ${t} TYPE)
  if(NOT type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY)$")
    message(FATAL_ERROR "ejk_generate_kernels: TARGET ${t} is a ${type}; give the executable or shared "
                        "library that uses the variants")
  endif()
  if(TARGET ${t}_ejk_kernels)
    message(FATAL_ERROR "ejk_generate_kernels: called twice for ${t}; list every key in one call")
  endif()
  foreach(backend IN LISTS arg_BACKENDS)
    if(NOT backend STREQUAL "cpu")
      message(FATAL_ERROR "ejk_generate_kernels: BACKENDS ${backend}: a program compiles CPU variants; "
                          "ship GPU variants in a bundle (ejk_add_kernel_bundle)")
    endif()
  endforeach()

  set(dir ${CMAKE_CURRENT_BINARY_DIR}/ejk_kernels/${t})
  set(specs_dir ${EJKERNEL_SPECS_DIR})
  if(arg_SPECS)
    set(specs_dir ${dir}/specs)
    _ejk_stage_specs(${specs_dir} ${arg_SPECS})
  endif()
  set(selection)
  if(DEFINED arg_VARIANTS)
    list(APPEND selection VARIANTS ${arg_VARIANTS})
  endif()
  _ejk_kernels_gen_args(args ${specs_dir} ${dir}/gen ${selection} KEYS ${arg_KEYS} TARGETS ${arg_TARGETS})
  ejk_gen_read_manifest(${EJKERNEL_GEN_EXECUTABLE} ${dir}/manifest.cmake ${args})
  # Hidden: the variants are the program's own; only the registration refers to them.
  ejk_gen_cpu_sources(sources EXTRA_FLAGS -fvisibility=hidden)
  if(NOT sources)
    message(FATAL_ERROR "ejk_generate_kernels: TARGET ${t}: the selection names no CPU variant")
  endif()

  file(GLOB specs ${specs_dir}/*.yaml)
  file(GLOB templates ${EJKERNEL_TEMPLATES_DIR}/*)
  file(GLOB_RECURSE kernels ${EJKERNEL_KERNELS_DIR}/*)
  set(gen_dep)
  if(TARGET ${EJKERNEL_GEN_COMMAND})
    set(gen_dep ${EJKERNEL_GEN_COMMAND})
  endif()
  list(LENGTH sources n)
  ejk_gen_add_step(${dir}/ejk-gen.stamp
    COMMAND ${EJKERNEL_GEN_COMMAND} ${args}
    BYPRODUCTS ${EJK_GEN_REGISTRY} ${sources}
    DEPENDS ${gen_dep} ${specs} ${templates} ${kernels}
    COMMENT "ejk-gen: ${n} CPU variants for ${t}")
  add_custom_target(${t}_ejk_generate DEPENDS ${dir}/ejk-gen.stamp)

  # Their own object library: C++20 and the kernel headers for the variants only, whatever the
  # program's own settings.
  add_library(${t}_ejk_kernels OBJECT ${EJK_GEN_REGISTRY} ${sources})
  add_dependencies(${t}_ejk_kernels ${t}_ejk_generate)
  set_target_properties(${t}_ejk_kernels PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                        CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${t}_ejk_kernels PRIVATE ${EJKERNEL_KERNELS_DIR})
  target_link_libraries(${t}_ejk_kernels PRIVATE ${EJKERNEL_LIBRARY})
  target_sources(${t} PRIVATE $<TARGET_OBJECTS:${t}_ejk_kernels>)
  # As target_link_libraries(PRIVATE) would, without requiring the program's own calls to use
  # the keyword form too.
  set_property(TARGET ${t} APPEND PROPERTY LINK_LIBRARIES ${EJKERNEL_LIBRARY})
endfunction()

function(ejk_add_kernel_bundle)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;OUTPUT;VARIANTS;BACKEND" "KEYS;ARCH")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ejk_add_kernel_bundle: unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_NAME OR NOT arg_OUTPUT)
    message(FATAL_ERROR "ejk_add_kernel_bundle: NAME and OUTPUT are required")
  endif()
  if(NOT DEFINED arg_VARIANTS AND NOT arg_KEYS)
    message(FATAL_ERROR "ejk_add_kernel_bundle(${arg_NAME}): give VARIANTS, KEYS or both")
  endif()
  get_filename_component(out ${arg_OUTPUT} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_BINARY_DIR})
  set(args bundle build --out ${out})
  if(DEFINED arg_VARIANTS)
    list(APPEND args --variants ${arg_VARIANTS})
  endif()
  foreach(key IN LISTS arg_KEYS)
    list(APPEND args --key ${key})
  endforeach()
  if(arg_BACKEND)
    list(APPEND args --backend ${arg_BACKEND})
  endif()
  if(arg_ARCH)
    list(JOIN arg_ARCH "," archs)
    list(APPEND args --arch ${archs})
  endif()
  set(cli_dep)
  if(TARGET ${EJKERNEL_CLI_COMMAND})
    set(cli_dep ${EJKERNEL_CLI_COMMAND})
  endif()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${EJKERNEL_CLI_COMMAND} ${args}
    DEPENDS ${cli_dep}
    COMMENT "ejk bundle build: ${out}"
    VERBATIM)
  add_custom_target(${arg_NAME} ALL DEPENDS ${out})
endfunction()
