#!/bin/bash
# Session 29 call 4: scripts/device-check.sh on 4de9f8c (whole-GEMM wgmma statements): the
# CUDA ctests (AOT set built by nvcc, every key through NVRTC), `ejk run --check`, NVRTC cold
# compile and cache hit, memcheck and racecheck.
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c4
OUT=$OUT/c4 timeout 560 bash scripts/device-check.sh > $OUT/c4/device_check.txt 2>&1
echo "device-check rc=$?"; tail -60 $OUT/c4/device_check.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
