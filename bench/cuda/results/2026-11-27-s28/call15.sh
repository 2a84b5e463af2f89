#!/bin/bash
# Session 28 call 15: the two consumer warpgroups out of step. Without the turn ring (nopp), the
# second starts EJK_SM90_LAG K/V tiles behind the first (branch wg-lag), so that one's item
# boundary (epilogue, S(0), softmax(0)) falls inside the other's steady state. Builds:
# d26 = main; lag0 / lag2 = `bash bench/cuda/build_prebuilt.sh .carry/lagN -DEJK_SM90_LAG=N`
# (their bench lists add d64 and d128 128x128 causal without the ring; lag2 rebuilt after the
# first run deadlocked, see the branch). check-bench of those two
# variants in both builds, then three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c15; mkdir -p $O
B="d26=.carry/d26/check_flash lag0=.carry/lag0/check_flash"
for b in lag0 lag2; do timeout 40 .carry/$b/check_flash check-bench 20261121 2 2 > $O/check_$b.txt 2>&1; echo "$b rc=$?: $(grep '^check:' $O/check_$b.txt)"; done
grep -q '^check: 16/16' $O/check_lag2.txt && B="$B lag2=.carry/lag2/check_flash"  # no A/B of a hang
bash bench/cuda/ab_builds.sh $O 3 $B \
  "64:1024,2048:bf16.d64.bq128.bk128.causal.wgmma\$,bf16.d64.bq128.bk128.causal.wgmma.nopp\$" \
  "128:1024:bf16.d128.bq128.bk128.causal.wgmma\$,bf16.d128.bq128.bk128.causal.wgmma.nopp\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c15.tgz c15 && rm -rf c15
