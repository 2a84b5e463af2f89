#!/bin/bash
# Session 10 call 2 (branch wt-wide): more consumer warpgroups per block. Three at head_dim 128
# (192 x 64, 192 x 80: S, P and O fit 160 registers) and four at head_dim 64 (256 x 64 in 112
# registers; per item and persistent) against the defaults, after their checks.
# .carry/v33 = bench/cuda/build_prebuilt.sh .carry/v33 -lineinfo on wt-wide (4b44f20 less its
# .nopp / 192 x 64 variants and the EJK_SM90_RECORD_ALL switch, added for call 3).
cd "$(dirname "$0")/../../../.."
B=.carry/v33/check_flash; O=$OUT/c2; mkdir -p $O
# bench_variants() indices 46-53 are the new shapes
$B check-bench 20261121 8 46 2>&1 | tail -3 | tee $O/check.txt
$B check-bench $RANDOM$RANDOM 8 46 2>&1 | tail -2 | tee -a $O/check.txt
timeout 240 compute-sanitizer --tool memcheck $B check-bench 7 2 49 2>&1 | tail -3 | tee $O/memcheck.txt
timeout 240 compute-sanitizer --tool racecheck $B check-bench 7 1 53 2>&1 | tail -3 | tee $O/racecheck.txt
timeout 240 compute-sanitizer --tool racecheck $B check-bench 7 1 48 2>&1 | tail -3 | tee -a $O/racecheck.txt
V128='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$,d128.bq192.bk64,d128.bq192.bk80'
V64='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,d64.bq256.bk64'
for pass in 1 2 3; do
  EJK_BENCH_D=128 EJK_BENCH_VARIANTS=$V128 timeout 150 $B bench >> $O/p$pass.jsonl
  EJK_BENCH_D=64 EJK_BENCH_VARIANTS=$V64 timeout 150 $B bench >> $O/p$pass.jsonl
done
python3 bench/cuda/compare_runs.py v33=$(ls $O/p*.jsonl | paste -sd,) | tee $O/ab.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
