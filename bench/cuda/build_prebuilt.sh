#!/usr/bin/env bash
# Builds the standalone CUDA check/bench (check_flash) and the runtime smoke test into DIR:
#   bench/cuda/build_prebuilt.sh DIR [extra nvcc flags, e.g. -DEJK_SM90_PROBE]
# from the repository root, on the GPU machine (build_and_check.sh calls it) or on a machine
# with nvcc and no GPU; a DIR built here and carried to the GPU machine is what EJK_PREBUILT
# takes (saves device time). Writes DIR/resources.txt: registers / spills per kernel.
# EJK_CUDA_GENCODE overrides the target (default sm_90a).
set -euo pipefail
d=$1; shift
mkdir -p "$d"
arch=${EJK_CUDA_GENCODE:--gencode=arch=compute_90a,code=sm_90a}
flags=(-std=c++20 -O3 -I kernels -I bench/cuda $arch -Xptxas -v "$@")
nvcc "${flags[@]}" -c bench/cuda/check_flash.cu -o "$d/check.o" 2> "$d/ptxas_check.log" &
nvcc "${flags[@]}" -c bench/cuda/bench_flash.cu -o "$d/bench.o" 2> "$d/ptxas_bench.log" &
wait %1 && wait %2 || { grep -v ptxas "$d"/ptxas_*.log | head -40; exit 1; }
nvcc $arch "$d/check.o" "$d/bench.o" -o "$d/check_flash"
rm -f "$d/check.o" "$d/bench.o"
python3 bench/cuda/ptxas_summary.py "$d/ptxas_check.log" "$d/ptxas_bench.log" > "$d/resources.txt"
# ptxas's C75xx warnings: wgmmas serialized, a kernel that passes the check at a fraction of
# its speed (NOTES.md session 12). Said loudly; the build still goes on.
grep -h '(C75' "$d"/ptxas_*.log | sed 's/^/WARNING: /' >&2 || true
# The runtime's own path: template -> NVRTC (dlopen) -> cuModuleLoadData -> cuLaunchKernel.
# fmt header-only (core's render_template): g++ 13 on the device warns falsely inside fmt 9.
g++ -std=c++20 -O2 -DFMT_HEADER_ONLY -Wno-stringop-overflow -I kernels -I core/include -I runtime/src -I bench/cuda \
  bench/cuda/runtime_smoke.cpp runtime/src/cuda/*.cpp core/src/render.cpp -ldl -o "$d/runtime_smoke"
