#!/bin/bash
# Session 10 call 4 (branch wt-st3): head_dim 128 persistent 128 x 128 with three K/V stages
# instead of two plus the O tile (no room for both: O then goes out from registers).
# .carry/v38 = build_prebuilt.sh -lineinfo on wt-st3 (e5ebcd1); bench_variants() 46-48 are the .st3 ones.
cd "$(dirname "$0")/../../../.."
B=.carry/v38/check_flash; O=$OUT/c4; mkdir -p $O
$B check-bench 20261121 3 46 2>&1 | tail -1 | tee $O/check.txt
$B check-bench $RANDOM$RANDOM 3 46 2>&1 | tail -1 | tee -a $O/check.txt
timeout 200 compute-sanitizer --tool racecheck $B check-bench 7 1 46 2>&1 | tail -1 | tee -a $O/check.txt
timeout 200 compute-sanitizer --tool memcheck $B check-bench 7 2 46 2>&1 | tail -1 | tee -a $O/check.txt
export EJK_BENCH_D=128 EJK_BENCH_VARIANTS='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$,.st3'
for pass in 1 2 3 4; do timeout 150 $B bench >> $O/p$pass.jsonl; done
python3 bench/cuda/compare_runs.py v38=$(ls $O/p*.jsonl | paste -sd,) | tee $O/ab.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
