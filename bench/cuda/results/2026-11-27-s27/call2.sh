#!/usr/bin/env bash
# Session 27 call 2, on c389b82 (the bias copy as its own op): scripts/device-check.sh (CUDA
# ctests, `ejk run --check` incl. the copy path (Sk 777, Sk 1501), compute-sanitizer), then the
# NVRTC time of bias keys before (0f74746's templates and kernels, carried in .carry/old) and
# after, alternating, one compile per fresh process, and `ejk compile` cold on the new build.
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
OUT=$OUT/c2 bash scripts/device-check.sh > $OUT/device_check.txt 2>&1
tail -60 $OUT/device_check.txt
{
for r in 1 2 3 4 5 6; do
  for flags in "--d 128 --causal --bias" "--d 64 --bq 192 --bk 128 --causal --bias" "--d 128 --causal"; do
    echo "round $r old"; (cd .carry/old && python3 bench/cuda/nvrtc_phases.py $flags --runs 1 --each | tail -1)
    echo "round $r new"; python3 bench/cuda/nvrtc_phases.py $flags --runs 1 --each | tail -1
  done
done
} 2>&1 > $OUT/nvrtc_ab.txt
python3 - $OUT/nvrtc_ab.txt <<'PY'
import re, sys, statistics, collections
rows = collections.defaultdict(list); tree = None; lines = open(sys.argv[1]).read().splitlines()
for l in lines:
    m = re.match(r"round \d+ (\w+)", l)
    if m: tree = m.group(1); continue
for i in range(0, len(lines), 2):
    tree = lines[i].split()[2]
    m = re.search(r"wall (\d+) ms; cpu user (\d+)", lines[i + 1])
    rows[(i // 2) % 6 // 2, tree].append((int(m.group(1)), int(m.group(2))))
keys = ["d128 causal bias", "d64 192x128 causal bias", "d128 causal"]
for k in range(3):
    for t in ("old", "new"):
        w = [x[0] for x in rows[k, t]]; u = [x[1] for x in rows[k, t]]
        print(f"{keys[k]:26s} {t}: wall median {statistics.median(w)} ms {sorted(w)}; user median {statistics.median(u)}")
PY
E=/tmp/ejk-build/cli/ejk
for r in 1 2 3 4; do
  for flags in "--d 128 --causal --bias" "--d 128 --causal --segments --sinks --bias"; do
    rm -rf /tmp/c2; EJK_CACHE_DIR=/tmp/c2 $E compile flash_attention --backend cuda --arch sm_90a $flags --json
  done
done
