#!/bin/bash
# Session 13 call 7: v49b (v49's pass-on of empty warpgroups, three consumers only; every
# 128-row kernel's SASS identical to v48's, checked here) against v48 on the 192 x 128 defaults
# (non-causal from 2k, causal from 4k), three alternating passes; then v49b's check on the full
# grid and on grids of three, and check-bench on grids of three.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
A=.carry/v48/check_flash; B=.carry/v49b/check_flash
bash bench/cuda/ab_builds.sh $O/ab 3 v48=$A v49b=$B 64:1024,2048,4096,8192,16384:'bf16.d64.bq192.bk128.wgmma$' \
  64:1024,4096,8192,16384:'bf16.d64.bq192.bk128.causal.wgmma$'
timeout 120 $B check 20261121 | tail -1 | tee $O/check.txt
EJK_PERSISTENT_GRID=3 timeout 180 $B check $RANDOM | tail -1 | tee -a $O/check.txt
EJK_PERSISTENT_GRID=3 timeout 240 $B check-bench $RANDOM | tail -1 | tee -a $O/check.txt
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
