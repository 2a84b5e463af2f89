#!/bin/bash
# Session 10 call 3 (branch wt-wide): head_dim 64 with more consumer warpgroups, second look.
# .carry/v35 = build_prebuilt.sh -lineinfo on wt-wide (4b44f20; item records for 1-2 consumers, as main);
# .carry/v36 = the same with -DEJK_SM90_RECORD_ALL (item records in every persistent block:
# does 192 x 128 still lose with them, and do 256 x 64's four consumers gain?). New variants:
# 256 x 64 without the turn ring, 192 x 64 persistent (bk 64 with three consumers).
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
for b in v35 v36; do
  .carry/$b/check_flash check-bench 20261121 12 46 2>&1 | tail -1 | sed "s/^/$b new shapes: /" | tee -a $O/check.txt
done
.carry/v36/check_flash check-bench $RANDOM$RANDOM 2>&1 | tail -1 | sed "s/^/v36 all: /" | tee -a $O/check.txt
for i in 2 3 52 57; do
  timeout 200 compute-sanitizer --tool racecheck .carry/v36/check_flash check-bench 7 1 $i 2>&1 | tail -1 | sed "s/^/v36 racecheck $i: /" | tee -a $O/check.txt
done
export EJK_BENCH_D=64 EJK_BENCH_VARIANTS='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,d64.bq256.bk64,d64.bq192.bk64'
for pass in 1 2 3; do
  for b in v35 v36; do timeout 150 .carry/$b/check_flash bench >> $O/$b.p$pass.jsonl; done
done
python3 bench/cuda/compare_runs.py v35=$(ls $O/v35.p*.jsonl | paste -sd,) v36=$(ls $O/v36.p*.jsonl | paste -sd,) | tee $O/ab.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
