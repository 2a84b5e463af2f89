#!/bin/bash
# Session 6 call 11: v23 (next item's first K/V before its Q; O staged by stmatrix) check + A/B
# against v21 (.carry/v28), interleaved, three passes.
cd "$(dirname "$0")/../.."
N=.carry/v29/check_flash
timeout 150 $N check 20261121 | tail -1
EJK_PERSISTENT_GRID=3 timeout 200 $N check $RANDOM | tail -1
EJK_PERSISTENT_GRID=2 timeout 200 $N check-bench $RANDOM | tail -1
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d128.bq128.bk144.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma
for pass in 1 2 3; do
  for S in 1024 2048 4096; do
    for B in .carry/v28 .carry/v29; do
      EJK_BENCH_S=$S $B/check_flash bench | grep -v 'wgmma.per_item\|wgmma.persist\|wgmma.nopp' | sed "s|^{|{\"bin\": \"$B\", \"pass\": $pass, |"
    done
  done
done > $OUT/ab.jsonl
python3 - $OUT/ab.jsonl <<'PY'
import json, sys, collections, statistics
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows[(r["d"], int(r["causal"]), r["s"], r["variant"], r["bin"].split("/")[1])].append(r["tflops"])
for k in sorted({k[:4] for k in rows}):
    a, b = rows.get(k + ("v28",), [0]), rows.get(k + ("v29",), [0])
    print(*k, "v21", a, "v23", b, f"median {(statistics.median(b)/statistics.median(a)-1)*100:+.1f}% best {(max(b)/max(a)-1)*100:+.1f}%")
PY
