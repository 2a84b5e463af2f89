#!/bin/bash
# Session 12 call 8: the device check of main (8f80eae; .carry/v46b is its build_prebuilt.sh
# output): build_and_check.sh's check step (fixed seed, grids of three, L2 head groups,
# check-bench on grids of three, memcheck, racecheck, the runtime's NVRTC path).
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c8
OUT=$OUT/c8 EJK_PREBUILT=.carry/v46b bash bench/cuda/build_and_check.sh check 2>&1 | tail -40 | tee $OUT/c8/log.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
