#!/bin/bash
# Session 23 call 3: v86 (branch bias-prefetch: sm90a bias keys whose tiles leave room stage the
# bias in shared memory, each consumer warp copying its 16 rows a tile ahead with 16-byte
# cp.async, reads conflict-free through a swizzle; the others keep v85's pairs + L2 prefetch).
# check, check_random and check-bench (grids of 3), memcheck 12-14, racecheck on 13 and 19 (bias
# staged), then the bias rows: main (v84) / v85 / v86, two passes.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
B=.carry/v86/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_random check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { cd $OUT && tar czf c3.tgz c3; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 13" "1 19"; do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 timeout 200 bash bench/cuda/ab_builds.sh $O/ab 2 \
  main=.carry/v84/check_flash v85=.carry/v85/check_flash v86=$B \
  "64:1024,4096,16384:bias" "128:1024,4096,16384:bias" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -13 $O/ab.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
