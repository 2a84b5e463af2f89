#!/bin/bash
# Session 12 call 7: v45b against v46b again (three alternating passes) where call 6 read them
# apart: head_dim 256 (call 6: causal 4k -2.8% with a 618-663 spread), head_dim 64 192 x 128,
# and the head_dim 128 defaults.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
B=.carry/v45b/check_flash; C=.carry/v46b/check_flash
V64='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
bash bench/cuda/ab_builds.sh $O 3 v45b=$B v46b=$C 256:1024,4096,16384:$V256 64:2048,8192:$V64 128:1024,8192:$V128
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
