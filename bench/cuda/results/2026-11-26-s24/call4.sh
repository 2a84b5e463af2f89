#!/bin/bash
# Session 24 call 4: l24 = two-consumer kernels that stage the bias read its pairs with one
# ldmatrix.x4 per four chunks (bias_pairs_staged) instead of a 4-byte shared load per chunk;
# three consumers (d64 192x128, the d64 bias default) keep the loads (ldmatrix spilled 92 B
# there) and serve as the control. check + check_random + check-bench (grids of 3), memcheck
# 12-14, racecheck on 13 and 19 (bias staged, two consumers); bias rows main (m24 = 6eaf13b) /
# l24, three passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
B=.carry/l24/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_random check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { cd $OUT && tar czf c4.tgz c4; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 13" "1 19"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 \
  main=.carry/m24/check_flash l24=$B "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -18 $O/ab.txt
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
