#!/bin/bash
# Session 24 call 3: o24 = each consumer warp stages and TMA-stores its own 16 rows of O (a
# 16-row box; the warpgroup's two named barriers around the staging become __syncwarp, except
# the Q-tile case, which still waits for its warpgroup's wgmmas). check + check-bench (grids of
# 3), memcheck 12-14, racecheck on 12 (O tile), 20 (three consumers), 36 (per item, O through
# the Q tile) and 38 (padded, every flag); A/B against m24 (= 6eaf13b) on the default keys of
# the issue's short rows, three passes; the d64 causal 1k / 2k rows paired with PyTorch SDPA
# (five passes) for both builds.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
B=.carry/o24/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1 || ok=0
for f in check check_bench; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -3)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { cd $OUT && tar czf c3.tgz c3; exit 1; }
EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 3 12 2>&1 | tail -2
for v in "1 12" "1 20" "1 36" "1 38"; do
  EJK_PERSISTENT_GRID=5 timeout 60 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done
echo "sanitizers ($(( $(date +%s) - t0 )) s)"
timeout 200 bash bench/cuda/ab_builds.sh $O/ab 3 main=.carry/m24/check_flash o24=$B \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq192.bk128.wgmma$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk128.wgmma$" \
  "256:1024:bf16.d256.bq128.bk80.causal.wgmma$" > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -16 $O/ab.txt
for b in o24 m24; do
  timeout 100 python3 bench/cuda/paired.py .carry/$b/check_flash $O/paired_$b --passes 5 --d 64 --s 1024,2048 \
    --causal 1 > $O/paired_$b.txt 2>&1
  echo "paired $b rc=$? ($(( $(date +%s) - t0 )) s)"; tail -3 $O/paired_$b.txt
done
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
