#!/bin/bash
# Session 13 call 2 (v48 = 7baabb1's kernels): (a) with drawn items, does 128 x 128 now beat the
# heuristic's long-causal tiles (head_dim 64: 192 x 128 from 4k; head_dim 128: 128 x 192 from
# 8k)? Both variants in one bench process per shape, three passes. (b) the issue's grid,
# paired with the peers row by row (paired.py, two passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
B=.carry/v48/check_flash
for pass in 1 2 3; do
  for s in 2048 4096 8192; do
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=1 \
      EJK_BENCH_VARIANTS='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$' \
      timeout 60 $B bench >> $O/tiles.jsonl
  done
  for s in 4096 8192 16384; do
    EJK_BENCH_D=128 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=1 \
      EJK_BENCH_VARIANTS='bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$' \
      timeout 60 $B bench >> $O/tiles.jsonl
  done
done
python3 bench/cuda/paired.py $B $O/paired --passes 2 2>&1 | tee $O/paired.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
