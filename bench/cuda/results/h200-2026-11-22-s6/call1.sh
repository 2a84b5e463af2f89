#!/bin/bash
# Session 6 call 1: v26 (finish + lse before the last P V wait, rcp) check; probe with the fill
# split; A/B v25 (session 5 final) vs v26 on the defaults at short S, interleaved twice.
cd "$(dirname "$0")/../.."
N=.carry/v26/check_flash; O=.carry/v25/check_flash; P=.carry/v26p/check_flash
timeout 150 $N check 20261121 | tail -1
EJK_PERSISTENT_GRID=3 timeout 200 $N check-bench $RANDOM | tail -1
probe() { python3 -c '
import sys, json
for l in sys.stdin:
    r = json.loads(l); p = r["probe"]
    print(r["d"], r["s"], int(r["causal"]), r["variant"][5:], r["tflops"], " ".join(f"{k}={v}" for k, v in p.items() if k not in ("blocks","sms","span_us")))
'; }
for S in 1024 2048; do
  EJK_BENCH_S=$S EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.wgmma $P bench
  EJK_BENCH_S=$S EJK_BENCH_D=128 EJK_BENCH_VARIANTS=d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma $P bench
  EJK_BENCH_S=$S EJK_BENCH_D=256 EJK_BENCH_VARIANTS=d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma $P bench
done | probe | tee $OUT/probe.txt
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,d128.bq128.bk144.wgmma
for pass in 1 2; do
  for S in 1024 2048 4096; do
    for B in $O $N; do
      EJK_BENCH_S=$S $B bench | sed "s|^{|{\"bin\": \"$B\", \"pass\": $pass, |"
    done
  done
done > $OUT/ab.jsonl
python3 - $OUT/ab.jsonl <<'PY'
import json, sys, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows[(r["d"], int(r["causal"]), r["s"], r["variant"], r["bin"].split("/")[1])].append(r["tflops"])
keys = sorted({k[:4] for k in rows})
for k in keys:
    a, b = rows.get(k + ("v25",), []), rows.get(k + ("v26",), [])
    if a and b:
        print(*k, "v25", a, "v26", b, f"{(max(b)/max(a)-1)*100:+.1f}%")
PY
