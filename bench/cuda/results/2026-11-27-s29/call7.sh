#!/bin/bash
# Session 29 call 7: w29b's kernels (whole-GEMM statements, step offsets on the descriptors' low
# word) paired with the peers: the issue's grid, three passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt; cat $O/gpu.txt
t0=$(date +%s)
timeout 430 python3 bench/cuda/paired.py .carry/w29b/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired rc=$? ($(( $(date +%s) - t0 )) s)"; tail -34 $O/paired.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
