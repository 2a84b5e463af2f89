#!/bin/bash
# Session 23 call 1: main with bias-pairs merged (uncommitted merge of 8675a85; kernels as
# session 22's v84, runtime with the two staging fixes): scripts/device-check.sh (CMake build,
# CUDA ctests incl. the random feature matrix, `ejk run --check`, sanitizers, NVRTC timings).
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
OUT=$O/dc timeout 560 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -45 $O/device_check.txt | cut -c1-400
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
