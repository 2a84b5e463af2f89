#!/bin/bash
# Session 11 call 3: the warpgroup index through a shuffle (ptxas keeps Q's wgmma descriptors in
# uniform registers; main put an R2UR before each S = Q K^T wgmma wherever Q is read from shared
# memory: 192 x 128, 128 x 192, head_dim 256). .carry/v43 = build_prebuilt.sh on main + that
# line; .carry/v40 = main. Checks and sanitizers on v43, then A/B of the defaults' tiles over
# the issue's grid, builds alternating, three passes.
cd "$(dirname "$0")/../../../.."
A=.carry/v40/check_flash; B=.carry/v43/check_flash; O=$OUT/c3; mkdir -p $O
{ $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 $B check $RANDOM 12 12 | tail -1
  $B check-bench $RANDOM | tail -1
  for i in 15 20 23; do timeout 100 compute-sanitizer --tool racecheck $B check 9 1 $i 2>&1 | tail -1; done
  timeout 120 compute-sanitizer --tool memcheck $B check 9 2 19 2>&1 | tail -1; } 2>&1 | tee $O/check.txt
V64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
S=1024,2048,4096,8192,16384
bash bench/cuda/ab_builds.sh $O 3 v40=$A v43=$B 64:$S:$V64 128:$S:$V128 256:$S:$V256
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
