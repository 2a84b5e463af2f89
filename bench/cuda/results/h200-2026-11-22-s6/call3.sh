#!/bin/bash
# Session 6 call 3: v27b (next Q after the item's last K/V tile) check; probe v26p vs v27bp;
# A/B v26 / v27 / v27b, interleaved twice.
cd "$(dirname "$0")/../.."
N=.carry/v27b/check_flash
timeout 150 $N check 20261121 | tail -1
EJK_PERSISTENT_GRID=3 timeout 200 $N check $RANDOM | tail -1
for P in .carry/v26p .carry/v27bp; do
  for S in 1024 2048; do
    EJK_BENCH_S=$S EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.wgmma $P/check_flash bench
    EJK_BENCH_S=$S EJK_BENCH_D=128 EJK_BENCH_VARIANTS=d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma $P/check_flash bench
  done | grep -v 'wgmma.per_item\|wgmma.persist\|wgmma.nopp' | sed "s|^{|{\"bin\": \"$P\", |" 
done > $OUT/probe.jsonl
python3 -c '
import sys, json
for l in open(sys.argv[1]):
    r = json.loads(l); p = r.get("probe", {})
    print(r["bin"][7:], r["d"], r["s"], int(r["causal"]), r["variant"][5:], r["tflops"], " ".join(f"{k}={v}" for k, v in p.items() if k not in ("blocks","sms","span_us")))
' $OUT/probe.jsonl
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma
for pass in 1 2; do
  for S in 1024 2048 4096; do
    for B in .carry/v26 .carry/v27 .carry/v27b; do
      EJK_BENCH_S=$S $B/check_flash bench | grep -v 'per_item\|persist\|nopp' | sed "s|^{|{\"bin\": \"$B\", \"pass\": $pass, |"
    done
  done
done > $OUT/ab.jsonl
python3 - $OUT/ab.jsonl <<'PY'
import json, sys, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows[(r["d"], int(r["causal"]), r["s"], r["variant"], r["bin"].split("/")[1])].append(r["tflops"])
for k in sorted({k[:4] for k in rows}):
    a, b, c = (rows.get(k + (v,), [0]) for v in ("v26", "v27", "v27b"))
    print(*k, "v26", a, "v27", b, "v27b", c, f"v27 {(max(b)/max(a)-1)*100:+.1f}% v27b {(max(c)/max(a)-1)*100:+.1f}%")
PY
