#!/bin/bash
# Session 13 call 8 (review): v50 = v48 without a leftover experiment in sm90_causal_order (an
# `asm volatile` mov of the pair count, committed by mistake with v48; it changes only the
# persistent causal kernels' SASS). Three alternating passes on the causal persistent defaults,
# then the checks that cover them (full grid, grids of three, L2 head groups, no counter,
# check-bench on grids of three).
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
A=.carry/v48/check_flash; B=.carry/v50/check_flash
Q64='bf16.d64.bq128.bk128.causal.wgmma$'; V192='bf16.d64.bq192.bk128.causal.wgmma$'
Q128='bf16.d128.bq128.bk128.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O/ab 3 v48=$A v50=$B 64:1024,2048:$Q64 64:4096,8192:$V192 128:1024,2048,4096:$Q128
{ timeout 120 $B check 20261121 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 180 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 EJK_NO_TILE_COUNTER=1 timeout 120 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 240 $B check-bench $RANDOM | tail -1; } | tee $O/check.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
