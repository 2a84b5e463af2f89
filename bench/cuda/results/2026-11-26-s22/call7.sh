#!/bin/bash
# Session 22 call 7: v82, timing only (not a product candidate: no fallback for misaligned rows
# or partial tiles): the bias as one 4-byte load per pair everywhere, no per-pair choice. Does
# call 6's d128 slowdown come from the choice between two kinds of loads, or from the 4-byte
# loads themselves? Bias rows A/B against .carry/v79 (main's kernels), two passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 150 bash bench/cuda/ab_builds.sh $O/ab 2 \
  main=.carry/v79/check_flash v82=.carry/v82/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
