#!/bin/bash
# Session 23 call 11 (.carry/v90 = main's kernels; the bench also times d128 bias keys on
# 128 x 64, which keeps four K/V stages beside the staged bias rows): d128 bias rows, 128x64 vs
# 128x128, three passes of one binary, after check-bench (grids of 3).
cd "$(dirname "$0")/../../../.."
O=$OUT/c11; mkdir -p $O
B=.carry/v90/check_flash
EJK_PERSISTENT_GRID=3 timeout 230 $B check-bench $RANDOM > $O/check_bench.txt 2>&1; echo "check-bench rc=$? $(tail -1 $O/check_bench.txt)"
for pass in 1 2 3; do
  for s in 1024 4096 16384; do
    EJK_BENCH_GRID=0 EJK_BENCH_BIAS=1 EJK_BENCH_D=128 EJK_BENCH_S=$s EJK_BENCH_VARIANTS=bias timeout 60 $B bench >> $O/v90.p$pass.jsonl
  done
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/v90.p*.jsonl")):
    for line in open(f):
        if line.startswith("{"):
            j = json.loads(line); rows[(j["causal"], j["s"], j["variant"])].append(j["tflops"])
for k in sorted(rows): print(k, "median", round(statistics.median(rows[k]), 1), "runs", rows[k])
PY
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
