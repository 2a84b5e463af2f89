# Generation of the ahead-of-time variants and the registry: the static library ejk_generated.
# Included by the top-level CMakeLists after add_subdirectory(generator).
#
# The generated file names depend on the spec's AOT sets and on EJK_VARIANTS, which only
# ejk-gen can expand, yet CMake must know them when it configures (one object per variant,
# compiled with its target's flags). So configuring builds a private copy of ejk-gen
# (${CMAKE_BINARY_DIR}/ejk-gen-host, incremental after the first time) and asks it for a
# manifest of the outputs. The build itself runs this build's ejk-gen target, so a changed
# generator regenerates. Configuring is re-run whenever a spec or the generator's code
# changes, so the manifest cannot go stale; ejk-gen writes only files whose content changed,
# so an edit that leaves a variant's text alone recompiles nothing.
#
# Inputs (cache variables): EJK_VARIANTS (regex over the canonical keys; empty: the whole AOT
# set), EJK_ENABLE_CUDA and EJK_CUDA_ARCHS (CUDA variants as cubins built by nvcc, e.g.
# "80;90a" -> targets sm80 and sm90a).
# Outputs: ejk_generated (PIC static library: registry.cpp + CPU AOT objects, include dirs
# kernels/ and core/include), the target ejk_generate, ${EJK_GENERATED_DIR}, and the ops' typed
# APIs: EJK_GEN_API_SOURCES (compiled into libejk) and EJK_GEN_API_INCLUDE_DIR (public headers).

get_filename_component(EJK_ROOT_DIR ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
set(EJK_SPECS_DIR ${EJK_ROOT_DIR}/specs)
set(EJK_TEMPLATES_DIR ${EJK_ROOT_DIR}/templates)
set(EJK_KERNELS_DIR ${EJK_ROOT_DIR}/kernels)
set(EJK_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
include(${CMAKE_CURRENT_LIST_DIR}/EjkGenRules.cmake)

# --- Configure time: the host generator and the manifest --------------------------------------
function(ejk_build_host_generator out_exe)
  set(dir ${CMAKE_BINARY_DIR}/ejk-gen-host)
  if(NOT EXISTS ${dir}/CMakeCache.txt)
    message(STATUS "ejk: building the configure-time ejk-gen in ${dir}")
    execute_process(
      COMMAND ${CMAKE_COMMAND} -S ${EJK_ROOT_DIR}/generator/host -B ${dir} -G ${CMAKE_GENERATOR}
              -DEJK_ROOT=${EJK_ROOT_DIR} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
              -DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM} -DCMAKE_BUILD_TYPE=
      RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
    if(rc)
      message(FATAL_ERROR "ejk: configuring the configure-time ejk-gen failed:\n${log}")
    endif()
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir} --target ejk-gen --parallel 2
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  if(rc)
    message(FATAL_ERROR "ejk: building the configure-time ejk-gen failed:\n${log}")
  endif()
  set(${out_exe} ${dir}/generator/ejk-gen PARENT_SCOPE)
endfunction()

# Re-configure when a spec or the generator's code changes: both decide the output list.
file(GLOB _ejk_gen_code CONFIGURE_DEPENDS
  ${EJK_ROOT_DIR}/core/CMakeLists.txt ${EJK_ROOT_DIR}/core/src/*
  ${EJK_ROOT_DIR}/core/include/ejk/core/*
  ${EJK_ROOT_DIR}/generator/CMakeLists.txt ${EJK_ROOT_DIR}/generator/src/*)
file(GLOB _ejk_spec_files CONFIGURE_DEPENDS ${EJK_SPECS_DIR}/*.yaml)
file(GLOB _ejk_template_files CONFIGURE_DEPENDS ${EJK_TEMPLATES_DIR}/*)
file(GLOB_RECURSE _ejk_kernel_files CONFIGURE_DEPENDS ${EJK_KERNELS_DIR}/*)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_ejk_gen_code} ${_ejk_spec_files})

set(_ejk_gen_backends cpu)
set(_ejk_gen_args --specs ${EJK_SPECS_DIR} --templates ${EJK_TEMPLATES_DIR}
                  --kernels ${EJK_KERNELS_DIR} --out ${EJK_GENERATED_DIR}
                  --api-out ${EJK_GENERATED_DIR}/api)
if(EJK_ENABLE_CUDA)
  set(_ejk_gen_backends cpu,cuda)
  list(TRANSFORM EJK_CUDA_ARCHS PREPEND sm OUTPUT_VARIABLE _ejk_cuda_targets)
  list(JOIN _ejk_cuda_targets "," _ejk_cuda_targets)
  list(APPEND _ejk_gen_args --targets cuda=${_ejk_cuda_targets})
endif()
list(APPEND _ejk_gen_args --backends ${_ejk_gen_backends})
if(NOT EJK_VARIANTS STREQUAL "")
  list(APPEND _ejk_gen_args --variants ${EJK_VARIANTS})
endif()

# EJK_HOST_GEN: also what tests calling ejk_generate_kernels on this build tree configure with.
ejk_build_host_generator(EJK_HOST_GEN)
ejk_gen_read_manifest(${EJK_HOST_GEN} ${EJK_GENERATED_DIR}/manifest.cmake ${_ejk_gen_args})

# --- Build time: generation ---------------------------------------------------------------------
ejk_gen_cpu_sources(_ejk_cpu_sources)
set(_ejk_cuda_sources)
foreach(group IN LISTS EJK_GEN_GROUPS)
  if(EJK_GEN_GROUP_${group}_BACKEND STREQUAL "cuda")
    list(APPEND _ejk_cuda_sources ${EJK_GEN_GROUP_${group}_SOURCES})
  endif()
endforeach()
set(_ejk_gen_inputs ejk-gen ${_ejk_spec_files} ${_ejk_template_files} ${_ejk_kernel_files})
list(LENGTH _ejk_cpu_sources _ejk_n_cpu)
list(LENGTH _ejk_cuda_sources _ejk_n_cuda)
message(STATUS "ejk: AOT variants from ejk-gen ${EJK_GEN_VERSION}: ${_ejk_n_cpu} cpu, ${_ejk_n_cuda} cuda"
               " (EJK_VARIANTS='${EJK_VARIANTS}')")

# CUDA: ejk-gen writes the sources, nvcc builds one cubin per variant, and a second ejk-gen run
# (registry only, from the same spec and selection) embeds the cubins into registry.cpp.
function(ejk_generate_with_cuda)
  if(CUDAToolkit_NVCC_EXECUTABLE)
    set(nvcc ${CUDAToolkit_NVCC_EXECUTABLE})
  else()
    find_program(EJK_GEN_NVCC nvcc PATHS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin REQUIRED)
    set(nvcc ${EJK_GEN_NVCC})
  endif()
  set(cubin_dir ${EJK_GENERATED_DIR}/cubins)
  ejk_gen_add_step(${EJK_GENERATED_DIR}/ejk-gen-sources.stamp
    COMMAND ejk-gen ${_ejk_gen_args} --only sources
    BYPRODUCTS ${_ejk_cpu_sources} ${_ejk_cuda_sources} ${EJK_GEN_API_SOURCES} ${EJK_GEN_API_HEADERS}
    DEPENDS ${_ejk_gen_inputs}
    COMMENT "ejk-gen: AOT variant sources in ${EJK_GENERATED_DIR}")
  set(cubins)
  foreach(group IN LISTS EJK_GEN_GROUPS)
    if(NOT EJK_GEN_GROUP_${group}_BACKEND STREQUAL "cuda")
      continue()
    endif()
    foreach(key source IN ZIP_LISTS EJK_GEN_GROUP_${group}_KEYS EJK_GEN_GROUP_${group}_SOURCES)
      set(cubin ${cubin_dir}/${key}.cubin)
      # C++20 as for the CPU objects (the kernels use class-type template parameters). The
      # source is a byproduct of the sources step: Makefiles know it only through the stamp, and
      # nvcc does not create the cubin directory (a fresh build tree failed on both).
      add_custom_command(
        OUTPUT ${cubin}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${cubin_dir}
        COMMAND ${nvcc} -cubin ${EJK_GEN_GROUP_${group}_FLAGS} -O3 -std=c++20
                -I${EJK_KERNELS_DIR} -MD -MF ${cubin}.d -o ${cubin} ${source}
        DEPENDS ${source} ${EJK_GENERATED_DIR}/ejk-gen-sources.stamp
        DEPFILE ${cubin}.d
        COMMENT "nvcc: ${key}"
        VERBATIM)
      list(APPEND cubins ${cubin})
    endforeach()
  endforeach()
  ejk_gen_add_step(${EJK_GENERATED_DIR}/ejk-gen-registry.stamp
    COMMAND ejk-gen ${_ejk_gen_args} --only registry --cuda-cubins ${cubin_dir}
    BYPRODUCTS ${EJK_GEN_REGISTRY}
    DEPENDS ${_ejk_gen_inputs} ${cubins}
    COMMENT "ejk-gen: registry with ${_ejk_n_cuda} cubins")
  add_custom_target(ejk_generate DEPENDS ${EJK_GENERATED_DIR}/ejk-gen-sources.stamp
                                         ${EJK_GENERATED_DIR}/ejk-gen-registry.stamp)
endfunction()

if(_ejk_cuda_sources)
  ejk_generate_with_cuda()
else()
  # One run writes the sources and the registry, so the two cannot disagree.
  ejk_gen_add_step(${EJK_GENERATED_DIR}/ejk-gen.stamp
    COMMAND ejk-gen ${_ejk_gen_args}
    BYPRODUCTS ${EJK_GEN_REGISTRY} ${_ejk_cpu_sources} ${EJK_GEN_API_SOURCES} ${EJK_GEN_API_HEADERS}
    DEPENDS ${_ejk_gen_inputs}
    COMMENT "ejk-gen: AOT variants, registry and op APIs in ${EJK_GENERATED_DIR}")
  add_custom_target(ejk_generate DEPENDS ${EJK_GENERATED_DIR}/ejk-gen.stamp)
endif()

add_library(ejk_generated STATIC ${EJK_GEN_REGISTRY} ${_ejk_cpu_sources})
add_dependencies(ejk_generated ejk_generate)
set_target_properties(ejk_generated PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(ejk_generated PUBLIC ${EJK_KERNELS_DIR} ${EJK_ROOT_DIR}/core/include)
# The ops' typed APIs (ejk/ops/<op>.h, <op>_c.h): their sources are libejk's
# (EJK_GEN_API_SOURCES, added to its objects), their headers public (EJK_GEN_API_INCLUDE_DIR).
target_include_directories(ejk_generated PUBLIC ${EJK_GEN_API_INCLUDE_DIR})
