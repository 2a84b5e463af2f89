#!/bin/bash
# Session 23 call 2: v85 (branch bias-prefetch: each bias row's next tile prefetched into L2,
# one line per lane of the quad, a tile ahead of its loads) against v84 (main's kernels):
# check (seed 20261121), memcheck on check variants 12-14, bias rows A/B two passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
timeout 150 .carry/v85/check_flash check 20261121 > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s) pass=$(grep -c ^PASS $O/check.txt)"; grep -v "^PASS" $O/check.txt | tail -5
EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool memcheck --print-limit 5 .carry/v85/check_flash check 8 3 12 2>&1 | tail -2
echo "memcheck ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab 2 \
  main=.carry/v84/check_flash v85=.carry/v85/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
