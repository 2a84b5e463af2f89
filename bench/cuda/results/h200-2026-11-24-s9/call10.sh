#!/bin/bash
# Session 9 call 10: the issue's benchmark (bench/cuda/bench_issue.sh) on v27 and the head_dim 64 heuristic of call 9 (binaries
# .carry/v31 built here from 183c93b's tree by bench/cuda/build_prebuilt.sh): check, sanitizers,
# runtime smoke, the defaults against PyTorch SDPA FA2 / cuDNN, the GQA 32:8 + window 1024 +
# softcap 30 rows against FlexAttention (same protocol), JAX cuDNN, and the window rows through
# `ejk`. Results in grid3/
cd "$(dirname "$0")/../../../.."
export EJK_PREBUILT=.carry/v31
export EJK_BENCH_VARIANTS=d64.bq128.bk128.wgmma,d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,causal.win.cap
OUT=$OUT/grid3 timeout 585 bash bench/cuda/bench_issue.sh 2>&1 | grep -v "^PASS" | tail -75
(cd $OUT && tar czf grid3.tgz grid3 && rm -rf grid3)
