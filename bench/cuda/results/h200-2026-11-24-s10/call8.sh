#!/bin/bash
# Session 10 call 8: the issue's benchmark end to end (bench/cuda/bench_issue.sh, now ending with
# paired.py) on main's kernels (.carry/v37 = build_prebuilt.sh on 8d388c6), as session 9's
# call 6: check, sanitizers, runtime smoke, the default tiles against SDPA FA2 / cuDNN, the
# GQA 32:8 + window 1024 + softcap 30 rows against FlexAttention, JAX cuDNN, `ejk run`, and the
# paired grid. Results in grid/.
cd "$(dirname "$0")/../../../.."
export EJK_PREBUILT=.carry/v37
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,causal.win.cap
OUT=$OUT/grid timeout 570 bash bench/cuda/bench_issue.sh 2>&1 | grep -v "^PASS" | tail -75
(cd $OUT && tar czf grid.tgz grid && rm -rf grid)
