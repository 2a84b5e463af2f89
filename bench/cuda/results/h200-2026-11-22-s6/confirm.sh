#!/bin/bash
# Session 6 call 6: the defaults with the peers (HEAD kernels = v26: finish + lse under the last
# P V, rcp), in a fresh call.
cd "$(dirname "$0")/../.."
export EJK_PREBUILT=.carry/v28
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk144.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma
OUT=$OUT/confirm timeout 560 bash bench/cuda/build_and_check.sh bench 2>&1 | grep -v "^PASS\|^NVIDIA H200 ->" | tail -40
