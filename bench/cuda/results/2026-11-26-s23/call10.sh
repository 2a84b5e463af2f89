#!/bin/bash
# Session 23 call 10: call 9's timing part again (call 9 set EJK_BENCH_GRID=0, which skips the
# plain rows): d64 causal 1k / 2k / 4k, 128x64 with per-warpgroup tile counts (v89) against
# 128x128 and 192x128, three passes of one binary.
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
B=.carry/v89/check_flash
for pass in 1 2 3; do
  for s in 1024 2048 4096; do
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_VARIANTS='d64.bq128.bk64.causal.wgmma,d64.bq128.bk128.causal.wgmma$,d64.bq192.bk128.causal.wgmma$' timeout 60 $B bench >> $O/v89.p$pass.jsonl
  done
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/v89.p*.jsonl")):
    for line in open(f):
        if line.startswith("{"):
            j = json.loads(line); rows[(j["s"], j["causal"], j["variant"])].append(j["tflops"])
for k in sorted(rows): print(k, "median", round(statistics.median(rows[k]), 1), "runs", rows[k])
PY
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
