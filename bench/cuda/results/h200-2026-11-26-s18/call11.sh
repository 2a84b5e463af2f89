#!/bin/bash
# Session 18 call 11: per-item blocks and no turn ring against the default persistent kernels
# at head_dim 64 192 x 128 (call 10's standalone grid read .per_item +6% at 16k causal, +5%
# non-causal): main's build, five passes, each group twice in reversed variant order.
cd "$(dirname "$0")/../../../.."
O=$OUT/c11; mkdir -p $O
c='bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma.per_item$'
cr='bf16.d64.bq192.bk128.causal.wgmma.per_item$,bf16.d64.bq192.bk128.causal.wgmma$'
n='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.wgmma.per_item$,bf16.d64.bq192.bk128.wgmma.nopp$'
nr='bf16.d64.bq192.bk128.wgmma.nopp$,bf16.d64.bq192.bk128.wgmma.per_item$,bf16.d64.bq192.bk128.wgmma$'
bash bench/cuda/ab_builds.sh $O 5 s16=.carry/s16/check_flash "64:4096,8192,16384:$c" "64:4096,8192,16384:$cr" \
  "64:2048,4096,8192,16384:$n" "64:2048,4096,8192,16384:$nr" > $O/log.txt 2>&1
tail -32 $O/log.txt
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
