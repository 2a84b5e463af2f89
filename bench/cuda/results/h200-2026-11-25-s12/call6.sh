#!/bin/bash
# Session 12 call 6: speed of the fix. v44 (main before) against v45b (the q_empty release after
# S(0), beside the first K release) on the kernels with Q in registers (128 x 128 at head_dim 64
# and 128), then v45b against v46b (every use of the warpgroup index shuffled from lane 0) on
# the defaults it changes most (session 11's v43 readings). Two alternating passes each.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
A=.carry/v44/check_flash; B=.carry/v45b/check_flash; C=.carry/v46b/check_flash
Q64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$'
Q128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O/fix 2 v44=$A v45b=$B 64:1024,2048:$Q64 128:1024,2048,4096,16384:$Q128
V64='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V256='bf16.d256.bq128.bk80.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O/shfl 2 v45b=$B v46b=$C 64:1024,2048,4096,8192:$V64 64:1024,2048:$Q64 256:1024,4096:$V256
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
