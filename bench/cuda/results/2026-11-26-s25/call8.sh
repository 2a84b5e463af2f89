#!/bin/bash
# Session 25 call 8: every d64 causal 1k variant of the bench (the default 128x128 persistent
# drawn key, per item, Q from shared memory, 192x128, ...), three runs of check_flash bench,
# this session's kernels (b25e): is any schedule or tile ahead of the default where the row is
# 0.9% short of 1.6x FA2?
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
for i in 1 2 3; do
  EJK_BENCH_D=64 EJK_BENCH_S=1024 EJK_BENCH_CAUSAL=1 timeout 100 .carry/b25e/check_flash bench > $O/bench_$i.txt 2>&1
  echo "run $i rc=$?"
done
python3 - $O <<'PY'
import json, sys, glob, statistics, collections
rows = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/bench_*.txt")):
    for l in open(f):
        if l.startswith("{"):
            j = json.loads(l); rows[j["variant"]].append(j["tflops"])
for v, t in sorted(rows.items(), key=lambda kv: -statistics.median(kv[1])):
    print(f"{statistics.median(t):7.1f} ({min(t):.1f}-{max(t):.1f})  {v}")
PY
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
