#!/bin/bash
# Session 29 call 2: d26 / w29 again, seven passes (builds rotated), on the rows where call 1
# read within +-2.5%: head_dim 128 non-causal and causal, 64 causal 1k, 256 4k.
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
timeout 300 bash bench/cuda/ab_builds.sh $O/ab 7 d26=.carry/d26/check_flash w29=.carry/w29/check_flash \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096,16384:bf16.d128.bq128.bk128.wgmma\$" \
  "128:4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "128:16384:bf16.d128.bq128.bk192.causal.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$?"; sed -n '/every variant/,$p' $O/ab/ab.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
