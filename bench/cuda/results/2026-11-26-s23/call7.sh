#!/bin/bash
# Session 23 call 7: v88 (v86's kernels; the bench also times the d64 bias keys on 128 x 128,
# the heuristic's tile for extras): d64 bias rows, 128 x 128 vs 192 x 128, three passes of one
# binary; check-bench of v88 first (grids of 3).
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
t0=$(date +%s)
B=.carry/v88/check_flash
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt 2>&1; echo "check-bench rc=$? $(tail -1 $O/check_bench.txt)"
for pass in 1 2 3; do
  for s in 1024 4096 16384; do
    EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_VARIANTS=bias timeout 60 $B bench >> $O/v88.p$pass.jsonl
  done
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/v88.p*.jsonl")):
    for line in open(f):
        line = line.strip()
        if not line.startswith("{"): continue
        j = json.loads(line)
        rows[(j["causal"], j["s"], j["variant"])].append(j["tflops"])
for k in sorted(rows, key=str): print(k, "median", round(statistics.median(rows[k]), 1), "runs", rows[k])
PY
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
