#!/bin/bash
# Session 8 call 4: the issue's benchmark (bench/cuda/bench_issue.sh) on the final kernels and
# heuristic (v25 + the session's heuristic changes; binaries .carry/v26 built here from HEAD by
# .carry/build.sh): check, sanitizers, runtime smoke, the defaults against PyTorch SDPA FA2 /
# cuDNN, the GQA 32:8 + window 1024 + softcap 30 rows against FlexAttention (same protocol),
# JAX cuDNN, and the window rows through `ejk`.
cd "$(dirname "$0")/../../../.."
export EJK_PREBUILT=.carry/v26
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,causal.win.cap
OUT=$OUT/grid timeout 585 bash bench/cuda/bench_issue.sh 2>&1 | grep -v "^PASS" | tail -75
(cd $OUT && tar czf grid.tgz grid && rm -rf grid)
