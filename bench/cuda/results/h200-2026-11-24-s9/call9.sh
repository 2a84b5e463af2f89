#!/bin/bash
# Session 9 call 9: head_dim 64 at 1k-2k, 128 x 128 (two consumers: item records since v27)
# against the heuristic's 192 x 128 (three consumers, 1k pads 1024 rows to 6 x 192), five passes
# of .carry/v31 (183c93b). Non-causal 1k / 2k and causal 2k.
cd "$(dirname "$0")/../../../.."
B=.carry/v31/check_flash; O=$OUT/c9; mkdir -p $O
export EJK_BENCH_D=64 EJK_BENCH_VARIANTS=d64.bq128.bk128.wgmma,d64.bq192.bk128.wgmma,d64.bq128.bk128.causal.wgmma,d64.bq192.bk128.causal.wgmma
for pass in 1 2 3 4 5; do
  for S in 1024 2048; do
    EJK_BENCH_S=$S timeout 60 $B bench >> $O/p$pass.jsonl
  done
done
python3 - $O <<'PY' | tee $O/ab.txt
import json, sys, glob, statistics, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/p*.jsonl")):
    for l in open(f):
        r = json.loads(l); t[(r["causal"], r["s"], r["variant"])].append(r["tflops"])
for k in sorted(t):
    x = t[k]; print(f"{str(k[0]):5s} {k[1]:5d} {k[2]:42s} median {statistics.median(x):6.1f}  ({min(x):.0f}-{max(x):.0f}, n={len(x)})")
PY
