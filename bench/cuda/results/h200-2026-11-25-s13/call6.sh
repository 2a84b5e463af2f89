#!/bin/bash
# Session 13 call 6: v49 (a consumer warpgroup whose rows all lie past the block's valid rows
# passes the item on: waits and releases only) against v48, three alternating passes: d64
# 192 x 128 (1k / 2k / 4k end with a 64- / 128- / 64-row block) and controls that never have
# an empty warpgroup on these shapes (d64 128 x 128 both masks, d128 128 x 128, d256 128 x 80).
# Then v49's checks (build_and_check.sh check: odd lengths and varlen give empty warpgroups).
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
A=.carry/v48/check_flash; B=.carry/v49/check_flash
V192='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$'
V64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$'
V128='bf16.d128.bq128.bk128.wgmma$'
V256='bf16.d256.bq128.bk80.wgmma$'
bash bench/cuda/ab_builds.sh $O/ab 3 v48=$A v49=$B 64:1024,2048,4096:$V192 64:1024:$V64 128:1024:$V128 256:1024:$V256
mkdir -p $O/check
OUT=$O/check EJK_PREBUILT=.carry/v49 bash bench/cuda/build_and_check.sh check 2>&1 | grep -v "^bf16\|^f16" | tail -30 | tee $O/check/log.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
