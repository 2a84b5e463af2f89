#!/bin/bash
# Session 17 call 1 (prepared in session 16 as call5.sh): v61, the two
# consumer warpgroups of a block started a few tiles apart (v61_lag.patch on main). Without
# the turn ring (`.nopp`) each crosses its item boundaries on its own, but from a common start
# they stay in step (session 10: .nopp within -2.6..+1.8% of the ring at head_dim 64); with a
# lag of L tiles one runs its tile loop while the other is between items.
# Build on main + the patch (bench/cuda/build_prebuilt.sh): .carry/v61n (no lag: the .nopp
# baseline), .carry/v61l1 (-DEJK_SM90_LAG=1), .carry/v61l2 (-DEJK_SM90_LAG=2). The lag applies
# only to persistent two-consumer kernels without the ring (the new d64 128 x 128 .nopp
# variants; kLag + 2 <= stages); every other kernel is main's, the ring default the control.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
V='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma.nopp$,bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.wgmma.nopp$,bf16.d64.bq192.bk128.wgmma$'
# three passes, the builds' order rotated per pass; ab.txt: medians and ratios to v61n
bash bench/cuda/ab_builds.sh $O/ab 3 v61n=.carry/v61n/check_flash v61l1=.carry/v61l1/check_flash \
  v61l2=.carry/v61l2/check_flash "64:1024,2048,4096,16384:$V"
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
for side in v61l1 v61l2; do
  B=.carry/$side/check_flash
  { echo "== $side"
    timeout 90 $B check 20261201 | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1
    # the two lag variants (check list 35, 36) under racecheck, grids of three
    EJK_PERSISTENT_GRID=3 timeout 120 compute-sanitizer --tool racecheck $B check 7 2 35 | tail -2; } 2>&1 | tee -a $O/check.txt
done
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
