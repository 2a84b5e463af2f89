#!/bin/bash
# Session 9 call 9: head_dim 64 at 1k-2k, 128 x 128 (two consumers: item records since v27)
# against the heuristic's 192 x 128 (three consumers, 1k pads 1024 rows to 6 x 192), five passes
# of .carry/v31 (183c93b). Non-causal 1k / 2k and causal 2k.
cd "$(dirname "$0")/../../../.."
B=.carry/v31/check_flash; O=$OUT/c9; mkdir -p $O
export EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128.wgmma,d64.bq192.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.causal.wgmma
for pass in 1 2 3 4 5; do
  for S in 1024 2048; do
    EJK_BENCH_S=$S timeout 60 $B bench >> $O/p$pass.jsonl
  done
done
# medians of the five passes (the inline code this call ran printed the same numbers in
# another layout)
python3 bench/cuda/compare_runs.py v31=$(ls $O/p*.jsonl | paste -sd,) | tee $O/ab.txt
