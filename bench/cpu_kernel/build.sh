#!/usr/bin/env bash
# Builds the standalone CPU kernel check, the benchmark and the library compare_torch.py loads
# (no CMake project needed).
#   bench/cpu_kernel/build.sh [compiler=g++] [march=native] [out_dir=out/bench/cpu_kernel/<compiler>-<march>]
# Prints the output directory. Extra flags: EXTRA_FLAGS="...".
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cxx="${1:-g++}"
march="${2:-native}"
out="${3:-$root/out/bench/cpu_kernel/$(basename "$cxx")-$march}"
mkdir -p "$out"
flags=(-std=c++20 -O3 "-march=$march" -Wall -Wextra -Werror -pthread
       -I"$root/kernels" -I"$root/runtime/include" -I"$root/runtime/src" -I"$root/core/include" ${EXTRA_FLAGS:-})
support=("$root/runtime/src/ops/flash_attention/flash_reference.cpp" "$root/runtime/src/dtype.cpp")
# Two compiles at once at most (the machine is shared).
"$cxx" "${flags[@]}" "$root/bench/cpu_kernel/check.cpp" "${support[@]}" -lfmt -o "$out/cpu_kernel_check" &
check_pid=$!
"$cxx" "${flags[@]}" "$root/bench/cpu_kernel/bench.cpp" "${support[@]}" -lfmt -o "$out/cpu_kernel_bench"
wait "$check_pid"
"$cxx" "${flags[@]}" -fPIC -shared -Wl,--no-undefined "$root/bench/cpu_kernel/kernel_lib.cpp" \
  -o "$out/libejk_cpu_kernel_bench.so"
echo "$out"
