#!/bin/bash
# Session 6 call 4: probe v26p vs v27bp (fixed filter).
cd "$(dirname "$0")/../.."
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
