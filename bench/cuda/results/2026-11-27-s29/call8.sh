#!/bin/bash
# Session 29 call 8: d26 / w29b rotated, seven passes, on the head_dim 64 192x128 rows (call 7's
# grid read d64 non-causal 1k and causal 2k 3% below session 28's) and d128 non-causal 4k.
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
timeout 300 bash bench/cuda/ab_builds.sh $O/ab 7 d26=.carry/d26/check_flash w29b=.carry/w29b/check_flash \
  "64:1024,2048:bf16.d64.bq192.bk128.wgmma\$" \
  "64:2048,4096:bf16.d64.bq192.bk128.causal.wgmma\$" \
  "128:4096:bf16.d128.bq128.bk128.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$?"; sed -n '/every variant/,$p' $O/ab/ab.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
