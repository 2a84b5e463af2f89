#!/usr/bin/env bash
# Builds bench_api against a built tree of this repository (or of an older checkout, with
#   EJK_BENCH_OLD_API=1, for a before/after in one run):
#   bench/api/build.sh SOURCE_DIR BUILD_DIR OUT_BINARY
# With nvcc on PATH the CUDA rows are built in (the spin kernel needs nvcc); else CPU only.
set -euo pipefail
src=$(cd "$1" && pwd); build=$(cd "$2" && pwd); out=$3
here=$(cd "$(dirname "$0")" && pwd)
flags=(-O2 -std=c++20 -I"$src/runtime/include" -I"$src/kernels" -I"$src/core/include")
[[ -d $build/generated/api/include ]] && flags+=(-I"$build/generated/api/include")  # ejk/ops/*.h, generated
libs=(-L"$build/runtime" -lejk)  # after the source: linkers that drop unneeded libraries read in order
[[ ${EJK_BENCH_OLD_API:-0} == 1 ]] && flags+=(-DEJK_BENCH_OLD_API)
mkdir -p "$(dirname "$out")"
if command -v nvcc >/dev/null; then
  nvcc -x cu -arch=sm_90 -DEJK_BENCH_CUDA=1 "${flags[@]}" "$here/bench_api.cpp" "${libs[@]}" -lcuda -Xlinker -rpath,"$build/runtime" -o "$out"
else
  g++ "${flags[@]}" "$here/bench_api.cpp" "${libs[@]}" -Wl,-rpath,"$build/runtime" -o "$out"
fi
