#!/bin/bash
# Session 19 call 9: v70 (experiment, -DEJK_SM90_WG_TILES): three causal consumer warpgroups
# stop at the last key tile their own 64 rows see and pass the block's later tiles (waited,
# turn handed on, released). v70's full check, then v70 against v68 (main's kernels) at head_dim
# 64 causal in three passes, each group also in reversed variant order.
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
nvidia-smi --query-gpu=name --format=csv,noheader > $O/gpu.txt
EJK_PREBUILT=.carry/v70 OUT=$O/check timeout 300 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$?"; grep -h "passed\|SUMMARY\|FAIL" $O/check/*.txt | head -20
c='bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk96.causal.wgmma$'
cr='bf16.d64.bq192.bk96.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
timeout 250 bash bench/cuda/ab_builds.sh $O/ab 3 v68=.carry/v68/check_flash v70=.carry/v70/check_flash \
  "64:1024,2048,4096,8192:$c" "64:1024,2048,4096,8192:$cr" > $O/ab.txt 2>&1
grep -A30 "every variant" $O/ab.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
