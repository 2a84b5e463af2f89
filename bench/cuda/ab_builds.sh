#!/usr/bin/env bash
# A/B of two check_flash builds in one device call: in each pass build A and then build B time
# every group of shapes and variants; then compare_runs.py over the passes (medians, ratios,
# ranges). From the repository root:
#   bench/cuda/ab_builds.sh OUT PASSES NAME_A=BIN_A NAME_B=BIN_B GROUP...
# GROUP is D:S[,S...]:VARIANTS, VARIANTS in EJK_BENCH_VARIANTS' syntax (comma-separated names,
# a trailing `$` anchors one). Writes OUT/A.pN.jsonl, OUT/B.pN.jsonl and OUT/ab.txt.
set -uo pipefail
out=$1 passes=$2 a=$3 b=$4; shift 4
mkdir -p "$out"
for pass in $(seq "$passes"); do
  for side in A B; do
    [[ $side == A ]] && bin=${a#*=} || bin=${b#*=}
    for group in "$@"; do
      IFS=: read -r d lengths variants <<< "$group"
      for s in ${lengths//,/ }; do
        EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_VARIANTS=$variants timeout 60 "$bin" bench \
          >> "$out/$side.p$pass.jsonl"
      done
    done
  done
done
python3 bench/cuda/compare_runs.py "${a%%=*}=$(ls "$out"/A.p*.jsonl | paste -sd,)" \
  "${b%%=*}=$(ls "$out"/B.p*.jsonl | paste -sd,)" | tee "$out/ab.txt"
