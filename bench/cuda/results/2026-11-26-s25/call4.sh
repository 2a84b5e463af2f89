#!/bin/bash
# Session 25 call 4: b25s = two stages of staged bias per consumer warp (a lead of two tiles)
# where they fit (d64 / d48 / d32 at 128x128: 231424 B), one elsewhere (b25s-two-bias-stages.patch
# on 854dccb). check + check_random + check-bench (grids of 3), memcheck, racecheck on 45 (d48
# 128x128 every flag: two stages) and 13; A/B against b25e (854dccb's kernels), three passes,
# the d64 and d128 bias rows.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
B=.carry/b25s/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_random check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { grep -v ^PASS $O/check*.txt | head -30; cd $OUT && tar czf c4.tgz c4; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 2 44 2>&1 | tail -2
for v in "1 45" "1 13"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 170 bash bench/cuda/ab_builds.sh $O/ab_bias 3 \
  main=.carry/b25e/check_flash b25s=$B "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab_bias.txt 2>&1
echo "ab bias rc=$? ($(( $(date +%s) - t0 )) s)"; tail -19 $O/ab_bias.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
