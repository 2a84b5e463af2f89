#!/bin/bash
# Session 6 call 2: v27 (two Q slots, O staged in the item's slot) checks + sanitizers; probe;
# A/B v25 / v26 / v27 on the defaults, interleaved twice.
cd "$(dirname "$0")/../.."
N=.carry/v27/check_flash; P=.carry/v27p/check_flash
ok=1
timeout 150 $N check 20261121 > $OUT/check.txt || ok=0; tail -1 $OUT/check.txt; grep -v '^PASS' $OUT/check.txt | head -5
EJK_PERSISTENT_GRID=3 timeout 200 $N check $RANDOM > $OUT/check_random.txt || ok=0; tail -1 $OUT/check_random.txt; grep -v '^PASS' $OUT/check_random.txt | head -5
EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 120 $N check $RANDOM 12 12 | tail -1
EJK_PERSISTENT_GRID=2 timeout 200 $N check-bench $RANDOM | tail -1
[[ $ok == 1 ]] || { echo CHECK FAILED; exit 1; }
for v in "3 13" "2 20" "2 26"; do
  EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool memcheck --print-limit 5 $N check 8 $v | tail -2
done
for v in "2 18" "1 16" "1 26"; do
  EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool racecheck --print-limit 5 $N check 9 $v | tail -2
done
probe() { python3 -c '
import sys, json
for l in sys.stdin:
    r = json.loads(l); p = r["probe"]
    print(r["d"], r["s"], int(r["causal"]), r["variant"][5:], r["tflops"], " ".join(f"{k}={v}" for k, v in p.items() if k not in ("blocks","sms","span_us")))
'; }
for S in 1024 2048; do
  EJK_BENCH_S=$S EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.wgmma $P bench
  EJK_BENCH_S=$S EJK_BENCH_D=128 EJK_BENCH_VARIANTS=d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma $P bench
done | probe | grep -v per_item | tee $OUT/probe.txt
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,d128.bq128.bk144.wgmma,d128.bq128.bk192.causal.wgmma
for pass in 1 2; do
  for S in 1024 2048 4096 8192; do
    for B in .carry/v25 .carry/v26 .carry/v27; do
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
    a, b, c = (rows.get(k + (v,), [0]) for v in ("v25", "v26", "v27"))
    print(*k, "v25", a, "v26", b, "v27", c, f"v26 {(max(b)/max(a)-1)*100:+.1f}% v27 {(max(c)/max(a)-1)*100:+.1f}%")
PY
