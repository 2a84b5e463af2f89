# The CUDA backend of libejk: driver API and NVRTC, both loaded with dlopen at run time (never
# linked), so the library starts on machines without a driver or toolkit and reports why the
# CUDA backend is unavailable. Included from runtime/CMakeLists.txt when EJK_ENABLE_CUDA, after
# the ejk target exists. No CUDA library is linked; nvcc is only needed for the AOT cubins
# (cmake/EjkGenerate.cmake).
target_sources(ejk PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvrtc_compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp)
target_link_libraries(ejk PRIVATE ${CMAKE_DL_LIBS})
target_compile_definitions(ejk PRIVATE EJK_HAVE_CUDA=1)

# The same sources as a static library for the CUDA tests, which call the backend directly.
add_library(ejk_cuda_backend STATIC
  ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvrtc_compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp)
target_include_directories(ejk_cuda_backend
  PUBLIC ${CMAKE_CURRENT_LIST_DIR}/.. ${PROJECT_SOURCE_DIR}/kernels)
target_link_libraries(ejk_cuda_backend PUBLIC ejk_core PRIVATE ${CMAKE_DL_LIBS})
