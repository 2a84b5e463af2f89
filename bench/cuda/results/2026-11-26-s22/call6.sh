#!/bin/bash
# Session 22 call 6: v81 = main (v78) + the bias of each pair of elements as one 4-byte load
# where the tile lies inside the sequence and the rows are 4-byte aligned (else two clamped
# 2-byte loads, chosen per pair). Full check, then the bias rows (EJK_BENCH_BIAS=1) A/B against
# .carry/v79 (main's kernels, the same bench), two passes, builds rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v81 OUT=$O/check timeout 400 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -16
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 150 bash bench/cuda/ab_builds.sh $O/ab 2 \
  main=.carry/v79/check_flash v81=.carry/v81/check_flash \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
