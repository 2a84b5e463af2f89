#!/bin/bash
# Session 22 call 9 (branch bias-pairs, .carry/v84: a predicate per bias load; v83, clamped indices, spilled 112-140 B at d64 192 x 128 and was not run): the bias as 4-byte pairs only (the runtime
# copies a bias the kernels cannot read so; check_flash's biases have even row pitches). Full
# check, then the bias rows A/B against .carry/v79 (main's kernels), two passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v84 OUT=$O/check timeout 420 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -16
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 100 bash bench/cuda/ab_builds.sh $O/ab 2 \
  main=.carry/v79/check_flash v84=.carry/v84/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
