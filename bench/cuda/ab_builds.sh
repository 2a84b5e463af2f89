#!/usr/bin/env bash
# A/B/... of check_flash builds in one device call: in each pass every build times every group
# of shapes and variants, the builds' order rotated by one per pass (the build timed second in a
# call tends to read 1-2% higher: NOTES.md session 15); then compare_runs.py over the passes
# (medians, ratios to the first build, ranges). From the repository root:
#   bench/cuda/ab_builds.sh OUT PASSES NAME=BIN [NAME=BIN ...] GROUP...
# GROUP is D:S[,S...]:VARIANTS, VARIANTS in EJK_BENCH_VARIANTS' syntax (comma-separated names,
# a trailing `$` anchors one). Writes OUT/NAME.pN.jsonl per build and pass, and OUT/ab.txt.
set -uo pipefail
out=$1 passes=$2; shift 2
builds=()
while [[ $# -gt 0 && $1 == *=* ]]; do builds+=("$1"); shift; done
(( ${#builds[@]} >= 1 && $# >= 1 )) || { sed -n 2,8p "$0"; exit 2; }
mkdir -p "$out"
n=${#builds[@]}
for pass in $(seq "$passes"); do
  for i in $(seq 0 $((n - 1))); do
    build=${builds[$(( (i + pass - 1) % n ))]}
    name=${build%%=*} bin=${build#*=}
    for group in "$@"; do
      IFS=: read -r d lengths variants <<< "$group"
      for s in ${lengths//,/ }; do
        EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_VARIANTS=$variants timeout 60 "$bin" bench \
          >> "$out/$name.p$pass.jsonl"
      done
    done
  done
done
runs=()
for build in "${builds[@]}"; do
  name=${build%%=*}
  runs+=("$name=$(ls "$out/$name".p*.jsonl | paste -sd,)")
done
python3 bench/cuda/compare_runs.py "${runs[@]}" | tee "$out/ab.txt"
