#!/bin/bash
# Session 11 call 2 (branch wt-rot3): rotation with the rotate decision voted (__any_sync), so
# ptxas keeps the wgmma descriptors in uniform registers (call 1's build had an R2UR before
# each wgmma and lost 15-20%). .carry/v42 = build_prebuilt.sh on it; .carry/v40 = main.
# Checks and sanitizers on v42, then A/B of the defaults near the short rows, three passes.
cd "$(dirname "$0")/../../../.."
A=.carry/v40/check_flash; B=.carry/v42/check_flash; O=$OUT/c2; mkdir -p $O
{ $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $RANDOM 12 12 | tail -1
  $B check-bench $RANDOM | tail -1
  for i in 12 14 22; do timeout 100 compute-sanitizer --tool racecheck $B check 9 1 $i 2>&1 | tail -1; done
  timeout 120 compute-sanitizer --tool memcheck $B check 9 2 12 2>&1 | tail -1; } 2>&1 | tee $O/check.txt
V64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O 3 v40=$A v42=$B 64:1024,2048,4096:$V64 \
  128:1024,2048,4096,8192:$V128 256:1024,2048,4096:$V256
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
