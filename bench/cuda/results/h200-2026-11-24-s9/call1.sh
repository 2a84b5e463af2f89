#!/bin/bash
# Session 9 call 1: two or three blocks per SM (one consumer warpgroup each; .bpsN variants),
# built here by bench/cuda/build_prebuilt.sh .carry/v27 (code: branch wt-bps, e8b896f) and carried. Correctness first (a failed
# check stops the call), then the short rows (1k-4k, head_dim 64 and 128) of the defaults and
# the .bps variants in one binary, two passes, then memcheck / racecheck on the new variants.
cd "$(dirname "$0")/../../../.."
B=.carry/v27/check_flash; O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader
ok=1
timeout 150 $B check 20261121 > $O/check.txt || ok=0; tail -1 $O/check.txt; grep -v '^PASS' $O/check.txt | head
EJK_PERSISTENT_GRID=3 timeout 200 $B check $RANDOM > $O/check_random.txt || ok=0; tail -1 $O/check_random.txt; grep -v '^PASS' $O/check_random.txt | head
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt || ok=0; tail -1 $O/check_bench.txt; grep -v '^PASS' $O/check_bench.txt | head
[[ $ok == 1 ]] || { echo "CHECK FAILED: not timing"; exit 1; }
export EJK_BENCH_VARIANTS=d64.bq128.bk128,d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d128.bq128.bk128.wgmma,d128.bq128.bk128.causal.wgmma,.bps
for pass in 1 2; do
  for S in 1024 2048 4096; do
    EJK_BENCH_D=64 EJK_BENCH_S=$S timeout 100 $B bench >> $O/ab_$pass.jsonl
    EJK_BENCH_D=128 EJK_BENCH_S=$S timeout 100 $B bench >> $O/ab_$pass.jsonl
  done
done
python3 - $O/ab_1.jsonl $O/ab_2.jsonl <<'PY' | tee $O/ab.txt
import json, sys, statistics, collections
t = collections.defaultdict(list); occ = {}
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l); t[(r["d"], r["causal"], r["s"], r["variant"])].append(r["tflops"]); occ[r["variant"]] = r["blocks_per_sm"]
rows = collections.defaultdict(dict)
for (d, c, s, v), x in t.items(): rows[(d, c, s)][v] = statistics.median(x)
for key in sorted(rows):
    print(*key, "  ".join(f"{v.replace('bf16.', '')}[{occ[v]}]={x:.0f}" for v, x in sorted(rows[key].items(), key=lambda kv: -kv[1])))
PY
n=$(awk '{print $2}' $O/check.txt | uniq | wc -l)
awk '{print $2}' $O/check.txt | uniq | nl -v0 | tail -4  # the sanitized indices
EJK_PERSISTENT_GRID=5 timeout 150 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 4 $((n-4)) | tail -2
for i in $((n-4)) $((n-2)); do
  EJK_PERSISTENT_GRID=5 timeout 100 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 1 $i | tail -2
done
