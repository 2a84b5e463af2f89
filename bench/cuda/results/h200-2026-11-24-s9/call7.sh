#!/bin/bash
# Session 9 call 7: scripts/device-check.sh on 183c93b's tree (project build with CUDA on and the
# ORC JIT off: CUDA ctests, `ejk run --check` on the GPU over AOT and NVRTC keys, NVRTC cold
# compile and cache hit, compute-sanitizer on the runtime path).
cd "$(dirname "$0")/../../../.."
OUT=$OUT/dc timeout 560 bash scripts/device-check.sh 2>&1 | tail -60
