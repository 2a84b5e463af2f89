#!/bin/bash
# Session 22 call 2: v77 (the segment mask's ids loaded once per warp and shuffled to the lanes
# that need them, instead of one clamped load per key and lane). The full check of
# build_and_check.sh on .carry/v77, then the segments rows (EJK_BENCH_SEGMENTS=1: ids all 0, so
# the mask runs on every tile and no pair is dropped) A/B against .carry/v77o (main's kernels,
# the same bench), three passes, builds rotated. (The A/B filtered on "segments" and timed nothing:
# variant names say ".seg"; call 3 repeats it.)
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v77 OUT=$O/check timeout 330 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -25
EJK_BENCH_GRID=0 EJK_BENCH_SEGMENTS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 \
  main=.carry/v77o/check_flash v77=.carry/v77/check_flash \
  "64:1024,4096,16384:seg" "128:1024,4096,16384:seg" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -20 $O/ab.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
