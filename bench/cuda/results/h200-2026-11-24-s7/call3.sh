#!/bin/bash
# Session 7 call 3: the issue's benchmark on the final kernels (v24, .carry/v30): check,
# sanitizers, runtime smoke, the heuristic's defaults against PyTorch SDPA FA2 / cuDNN, JAX
# cuDNN, and GQA 32:8 + window 1024 + softcap 30 through `ejk` against FlexAttention.
cd "$(dirname "$0")/../../../.."
export EJK_PREBUILT=.carry/v30
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk144.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma
OUT=$OUT/grid timeout 580 bash bench/cuda/bench_issue.sh 2>&1 | grep -v "^PASS" | tail -60
