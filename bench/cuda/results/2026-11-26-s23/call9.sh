#!/bin/bash
# Session 23 call 9 (branch wg-diag, .carry/v89): two causal consumers with block_k <= 64 stop at
# their own last key tile (as three do since v70): at 128 x 64 the first warpgroup skips the
# diagonal's second tile. check + check-bench (grids of 3), then d64 causal 1k / 2k / 4k:
# 128x64 (new) against 128x128 and 192x128, three passes of one binary.
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
t0=$(date +%s)
B=.carry/v89/check_flash
timeout 120 $B check 20261121 > $O/check.txt 2>&1; echo "check rc=$? $(tail -1 $O/check.txt)"
EJK_PERSISTENT_GRID=3 timeout 220 $B check-bench $RANDOM > $O/check_bench.txt 2>&1; echo "check-bench rc=$? $(tail -1 $O/check_bench.txt)"
echo "checks ($(( $(date +%s) - t0 )) s)"
for pass in 1 2 3; do
  for s in 1024 2048 4096; do
    EJK_BENCH_GRID=0 EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_VARIANTS='d64.bq128.bk64.causal.wgmma,d64.bq128.bk128.causal.wgmma$,d64.bq192.bk128.causal.wgmma$' timeout 60 $B bench >> $O/v89.p$pass.jsonl
  done
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/v89.p*.jsonl")):
    for line in open(f):
        if line.startswith("{"):
            j = json.loads(line); rows[(j["s"], j["variant"])].append(j["tflops"])
for k in sorted(rows): print(k, "median", round(statistics.median(rows[k]), 1), "runs", rows[k])
PY
echo "done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
