#!/bin/bash
# Session 18 call 3: the d64 causal tile shapes of main's build (.carry/s16) at the lengths
# short of 1.6x FA2 (1k, 2k, 4k), five passes; the default there is bq128.bk128.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
V='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk96.causal.wgmma$,bf16.d64.bq192.bk112.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq128.bk192.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma.per$,bf16.d64.bq192.bk128.causal.wgmma.per$,bf16.d64.bq192.bk128.causal.wgmma.nopp$'
bash bench/cuda/ab_builds.sh $O 5 s16=.carry/s16/check_flash "64:1024,2048,4096:$V" > $O/log.txt 2>&1
tail -40 $O/log.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
