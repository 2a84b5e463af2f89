# Replay tests: each fuzz target (fuzz/targets) linked with a plain main (replay_main.cpp) and
# run over its committed seed corpus (fuzz/corpus/<target>) and every input a fuzzing run has
# crashed on (tests/fuzz/<target>), in the normal build and its ASan + UBSan pass. Included
# from tests/runtime/CMakeLists.txt; the libFuzzer build itself is fuzz/CMakeLists.txt.
set(_fuzz_dir ${PROJECT_SOURCE_DIR}/fuzz)
set(_fuzz_libs_expr ejk_core)
set(_fuzz_libs_spec ejk_core)
set(_fuzz_libs_npy ejk_cli_support ejk_core)
set(_fuzz_libs_cache_entry ejk_cache)
set(_fuzz_libs_payload_check ejk_cache)
set(_fuzz_libs_bundle ejk_bundle zstd::libzstd_shared)
set(_fuzz_libs_load ejk_cli_support ejk_core nlohmann_json::nlohmann_json)
set(_fuzz_libs_cli_parse ejk_cli_support ejk_core)
set(_fuzz_libs_pattern ejk_core)
set(_fuzz_libs_c_args ejk_core)
# The C ABI's readers are hidden inside libejk: the replay compiles them itself.
set(_fuzz_sources_c_args ${PROJECT_SOURCE_DIR}/runtime/src/api/args.cpp ${PROJECT_SOURCE_DIR}/runtime/src/api/c_args.cpp
                         ${PROJECT_SOURCE_DIR}/runtime/src/tensor_view.cpp ${PROJECT_SOURCE_DIR}/runtime/src/dtype.cpp)
foreach(target expr spec npy cache_entry payload_check bundle load cli_parse pattern c_args)
  add_executable(fuzz_replay_${target} ${_fuzz_dir}/replay_main.cpp ${_fuzz_dir}/targets/fuzz_${target}.cpp
                 ${_fuzz_sources_${target}})
  target_link_libraries(fuzz_replay_${target} PRIVATE ${_fuzz_libs_${target}} fmt::fmt)
  target_include_directories(fuzz_replay_${target} PRIVATE ${PROJECT_SOURCE_DIR}/cli ${PROJECT_SOURCE_DIR}/runtime/src
                                                           ${PROJECT_SOURCE_DIR}/runtime/include)
  add_test(NAME fuzz.replay.${target}
           COMMAND fuzz_replay_${target} ${_fuzz_dir}/corpus/${target}
                   ${PROJECT_SOURCE_DIR}/tests/fuzz/${target})
endforeach()
