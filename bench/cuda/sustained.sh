#!/usr/bin/env bash
# Sustained comparison at D=128 (what a long training job sees: the chip at its power cap):
# ours (check_flash bench with EJK_BENCH_SUSTAIN=6: back-to-back launches for 6 s, mean per
# launch) against cuDNN back to back for 6 s, the heuristic's tile, SM clock and power sampled.
#   EJK_PREBUILT=dir bash bench/cuda/sustained.sh     (dir holds check_flash; results in $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
bin=${EJK_PREBUILT:-build-cuda-check}/check_flash
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" &
smi=$!
export EJK_BENCH_D=128 EJK_BENCH_SUSTAIN=6 EJK_BENCH_VARIANTS=d128.bq128.bk192.wgmma,d128.bq128.bk192.causal.wgmma
for run in "8192 0" "16384 0" "16384 1"; do
  set -- $run
  EJK_BENCH_S=$1 EJK_BENCH_CAUSAL=$2 $bin bench
  python3 bench/cuda/cudnn_sustained.py $1 $2
done | tee "$OUT/sustained.txt"
kill $smi
