#!/bin/bash
# Session 22 call 3: call 2's A/B of the segments rows (v77 against main's kernels; call 2's
# filter matched no variant name), three passes, then the product path on the v77 tree
# (scripts/device-check.sh: CMake build, CUDA ctests incl. the random feature matrix with
# segments, `ejk run --check`, sanitizers, NVRTC timings).
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_BENCH_GRID=0 EJK_BENCH_SEGMENTS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 \
  main=.carry/v77o/check_flash v77=.carry/v77/check_flash \
  "64:1024,4096,16384:seg" "128:1024,4096,16384:seg" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -16 $O/ab.txt
OUT=$O/dc timeout $(( 570 - ($(date +%s) - t0) )) bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -40 $O/device_check.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
