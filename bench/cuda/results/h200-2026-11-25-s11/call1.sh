#!/bin/bash
# Session 11 call 1 (branch wt-rot3): rotation in persistent blocks with item records, Q in
# registers and an O tile (kRotate): an item's last turn also issues the next item's S(0), and
# the O store follows the next item's first softmax. .carry/v41 = build_prebuilt.sh on
# wt-rot3; .carry/v40 = main (f669bdf). Checks and sanitizers on v41, then the 128 x 128 keys
# at 1k / 2k / 4k (both builds, alternating, three passes).
cd "$(dirname "$0")/../../../.."
A=.carry/v40/check_flash; B=.carry/v41/check_flash; O=$OUT/c1; mkdir -p $O
{ $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 $B check $RANDOM | tail -1
  $B check-bench $RANDOM | tail -1
  for i in 12 14 22; do timeout 100 compute-sanitizer --tool racecheck $B check 9 1 $i 2>&1 | tail -1; done
  timeout 120 compute-sanitizer --tool memcheck $B check 9 2 12 2>&1 | tail -1; } 2>&1 | tee $O/check.txt
V64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O 3 v40=$A v41=$B 64:1024,2048,4096:$V64 128:1024,2048,4096:$V128
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
