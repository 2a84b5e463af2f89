#!/usr/bin/env bash
# Session 27 call 3: scripts/device-check.sh again after the device tests pass the bias copy to
# their launches (call 2: the random-problems case failed: its bias cases with odd Sk had no copy
# kernel to run). Then the random-problems case once more, its whole output.
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
OUT=$OUT/c3 bash scripts/device-check.sh > $OUT/device_check.txt 2>&1
grep -E "tests passed|FAILED|Failed|PASS|FAIL|exit:|SUMMARY|compile_ms" $OUT/device_check.txt | cut -c1-220
/tmp/ejk-build/tests/cuda/test_cuda_backend "CUDA flash forward matches the float64 reference on random problems" 2>&1 | tail -8
