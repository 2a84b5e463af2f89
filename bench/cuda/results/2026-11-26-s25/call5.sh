#!/bin/bash
# Session 25 call 5: call 4's check-bench on b25s ran past its 200 s timeout (no failure printed;
# 843 of 864 cases written, block-buffered). Again with line-buffered output and 420 s, timed;
# then memcheck, racecheck on 45 (two bias stages) and 13, and the A/B against b25e.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
B=.carry/b25s/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt; nproc; grep -m1 "model name" /proc/cpuinfo
t0=$(date +%s)
EJK_PERSISTENT_GRID=3 timeout 420 stdbuf -oL $B check-bench $RANDOM > $O/check_bench.txt 2>&1
echo "check-bench rc=$? $(grep -c ^PASS $O/check_bench.txt) PASS ($(( $(date +%s) - t0 )) s); $(grep -v ^PASS $O/check_bench.txt | tail -3)"
awk '{print $2}' $O/check_bench.txt | uniq -c | tail -4
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 2 44 2>&1 | tail -2
for v in "1 45" "1 13"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 120 bash bench/cuda/ab_builds.sh $O/ab_bias 3 \
  main=.carry/b25e/check_flash b25s=$B "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab_bias.txt 2>&1
echo "ab bias rc=$? ($(( $(date +%s) - t0 )) s)"; tail -19 $O/ab_bias.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
