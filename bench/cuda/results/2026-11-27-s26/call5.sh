#!/bin/bash
# Session 26 call 5: d26 = a drawing block's first item is its own index (no atomic before the
# launch's first loads; later tickets offset by the grid). Checks (check, check_random on grids
# of 3 and 1: the tile counter's protocol; each case also asserts the counter left zero), then
# A/B against main (b26), five passes, builds rotated: the drawn keys' short rows.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
B=.carry/d26/check_flash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
t0=$(date +%s)
ok=1
timeout 120 $B check 20261121 > $O/check.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=3 timeout 150 $B check $RANDOM > $O/check_random.txt 2>&1 || ok=0
EJK_PERSISTENT_GRID=1 timeout 150 $B check $RANDOM 40 > $O/check_grid1.txt 2>&1 || ok=0
for f in check check_random check_grid1; do echo "$f: $(grep -c ^PASS $O/$f.txt) PASS; $(grep -v ^PASS $O/$f.txt | tail -2)"; done
echo "checks ok=$ok ($(( $(date +%s) - t0 )) s)"
[[ $ok == 1 ]] || { cd $OUT && tar czf c5.tgz c5; exit 1; }
timeout 300 bash bench/cuda/ab_builds.sh $O/ab 5 main=.carry/b26/check_flash d26=$B \
  '64:1024,2048:d64.bq128.bk128.causal.wgmma$,d64.bq192.bk128.causal.wgmma$' \
  '128:1024,2048,4096:d128.bq128.bk128.causal.wgmma$' > $O/ab.txt 2>&1
echo "ab rc=$? ($(( $(date +%s) - t0 )) s)"; tail -9 $O/ab.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
