# The CUDA backend of libejk: driver API and NVRTC, both loaded with dlopen at run time (never
# linked), so the library starts on machines without a driver or toolkit and reports why the
# CUDA backend is unavailable. Included from runtime/CMakeLists.txt when EJK_ENABLE_CUDA. No
# CUDA library is linked; nvcc is only needed for the AOT cubins (cmake/EjkGenerate.cmake).
target_sources(ejk_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nvrtc_compiler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tma_map.cpp)
target_compile_definitions(ejk_objects PUBLIC EJK_HAVE_CUDA=1)
