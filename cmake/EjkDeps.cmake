# Third-party dependencies, all from Debian packages (scripts/setup-deps.sh installs them).
find_package(fmt REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Threads REQUIRED)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_package(zstd CONFIG)

if(EJK_ENABLE_ORC_JIT)
  # Pinned to the 19 prefix: find_package(LLVM 19) rejects 19.1.x (exact MAJOR.MINOR match),
  # and an unpinned search may find another installed LLVM.
  find_package(LLVM REQUIRED CONFIG PATHS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
  find_package(Clang REQUIRED CONFIG PATHS /usr/lib/llvm-19/lib/cmake/clang NO_DEFAULT_PATH)
  message(STATUS "ejk: ORC JIT with LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
endif()

if(EJK_ENABLE_CUDA STREQUAL "AUTO")
  find_program(EJK_NVCC nvcc PATHS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
  if(EJK_NVCC)
    set(EJK_ENABLE_CUDA ON)
  else()
    set(EJK_ENABLE_CUDA OFF)
  endif()
endif()
if(EJK_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "ejk: CUDA backend on (toolkit ${CUDAToolkit_VERSION}, archs ${EJK_CUDA_ARCHS})")
endif()
