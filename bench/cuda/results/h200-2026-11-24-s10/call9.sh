#!/bin/bash
# Session 10 call 9 (branch wt-nopp): 128 x 128 with two consumers and no turn ring at the short
# rows, against the ring (the defaults). Without the ring each warpgroup crosses its item
# boundary on its own (as far as the shared Q and the 4- / 2-stage K/V ring let them drift).
# .carry/v39 = build_prebuilt.sh on wt-nopp (158a77e); bench_variants() 46-49 are the new twins.
cd "$(dirname "$0")/../../../.."
B=.carry/v39/check_flash; O=$OUT/c9; mkdir -p $O
$B check-bench 20261121 4 46 2>&1 | tail -1 | tee $O/check.txt
$B check-bench $RANDOM$RANDOM 4 46 2>&1 | tail -1 | tee -a $O/check.txt
timeout 200 compute-sanitizer --tool racecheck $B check-bench 7 1 47 2>&1 | tail -1 | tee -a $O/check.txt
for pass in 1 2 3; do
  for S in 1024 2048 4096; do
    EJK_BENCH_D=64 EJK_BENCH_S=$S EJK_BENCH_VARIANTS='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq128.bk128.wgmma.nopp$,bf16.d64.bq128.bk128.causal.wgmma.nopp$' timeout 60 $B bench >> $O/p$pass.jsonl
    EJK_BENCH_D=128 EJK_BENCH_S=$S EJK_BENCH_VARIANTS='bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk128.wgmma.nopp$,bf16.d128.bq128.bk128.causal.wgmma.nopp$' timeout 60 $B bench >> $O/p$pass.jsonl
  done
done
python3 bench/cuda/ab_twins.py .nopp $O/p*.jsonl | tee $O/twins.txt
python3 bench/cuda/compare_runs.py v39=$(ls $O/p*.jsonl | paste -sd,) | tee $O/ab.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
