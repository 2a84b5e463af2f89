#!/bin/bash
# Session 12 call 11: the device check of main (75a8985; .carry/v47 is its build_prebuilt.sh
# output): build_and_check.sh's check step (fixed seed, grids of three, L2 head groups,
# check-bench on grids of three, memcheck, racecheck, the runtime's NVRTC path).
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c11
OUT=$OUT/c11 EJK_PREBUILT=.carry/v47 bash bench/cuda/build_and_check.sh check 2>&1 | tail -40 | tee $OUT/c11/log.txt
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
