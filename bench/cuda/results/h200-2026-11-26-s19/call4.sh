#!/bin/bash
# Session 19 call 4: head_dim 64 without the turn ring (.nopp) against the default ring at the
# rows short of 1.6x FA2 (sessions 10 and 17 read +0.3..+1.8% for causal 128 x 128). One build
# (.carry/nopp = v68 + d64 128 x 128 .nopp bench variants), five passes, each group also in
# reversed variant order.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
c='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma.nopp$'
cr='bf16.d64.bq128.bk128.causal.wgmma.nopp$,bf16.d64.bq128.bk128.causal.wgmma$'
n='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk128.wgmma.nopp$,bf16.d64.bq128.bk128.wgmma.nopp$'
nr='bf16.d64.bq128.bk128.wgmma.nopp$,bf16.d64.bq192.bk128.wgmma.nopp$,bf16.d64.bq192.bk128.wgmma$'
timeout 400 bash bench/cuda/ab_builds.sh $O 5 nopp=.carry/nopp/check_flash "64:1024,2048,4096:$c" "64:1024,2048,4096:$cr" \
  "64:1024,2048:$n" "64:1024,2048:$nr" > $O/log.txt 2>&1
timeout 150 .carry/nopp/check_flash check-bench 7 > $O/check_bench.txt 2>&1; tail -1 $O/check_bench.txt
python3 - $O <<'PY'
import json, glob, statistics, sys, collections
d = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/nopp.p*.jsonl"):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); d[(r.get("causal"), r["s"], r["variant"])].append(r["tflops"])
for k in sorted(d, key=str):
    v = d[k]; print(k, f"median {statistics.median(v):.1f} n={len(v)} [{min(v):.1f}-{max(v):.1f}]")
PY
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
