#!/usr/bin/env bash
# Sustained comparison (what a long training job sees: the chip at its power cap):
# ours (check_flash bench with EJK_BENCH_SUSTAIN=6: back-to-back launches for 6 s, mean per
# launch) against cuDNN back to back for 6 s (peers.py --sustain), the heuristic's tile, SM clock
# and power sampled.
# EJK_SUSTAIN_ROWS="D,S,causal,variant ..." picks the rows (default: D=128 8k, 16k, 16k causal).
#   EJK_PREBUILT=dir bash bench/cuda/sustained.sh     (dir holds check_flash; results in $OUT)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
bin=${EJK_PREBUILT:-build-cuda-check}/check_flash
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$OUT/smi.csv" &
smi=$!
# Rows: head_dim, S, causal, our variant (the heuristic's default for that row).
rows=${EJK_SUSTAIN_ROWS:-"128,8192,0,d128.bq128.bk128.wgmma 128,16384,0,d128.bq128.bk128.wgmma 128,16384,1,d128.bq128.bk192.causal.wgmma"}
export EJK_BENCH_SUSTAIN=6
for row in $rows; do
  IFS=, read -r d s c v <<< "$row"
  EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_CAUSAL=$c EJK_BENCH_VARIANTS=$v $bin bench
  python3 bench/cuda/peers.py flash --b $((16384 / s)) --hq $((2048 / d)) --hkv $((2048 / d)) --s $s --d $d \
    $([[ $c == 1 ]] && echo --causal) --peer torch_sdpa_cudnn --no-jax --sustain 6
done | tee "$OUT/sustained.txt"
kill $smi
