#!/bin/bash
# Session 7 call 4: the ring (default) against no turns (.nopp) at head_dim 64 bq192, three more
# passes in one binary (.carry/v30); then scripts/device-check.sh on the final tree (project
# build with CUDA on and the ORC JIT off, CUDA tests incl. `ejk compile`'s shared_bytes,
# ejk run --check on the GPU, NVRTC cold compile and cache hit, compute-sanitizer).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
for pass in 1 2 3; do EJK_BENCH_VARIANTS=d64.bq192.bk128 timeout 120 .carry/v30/check_flash bench > $O/ab$pass.jsonl; done
python3 - $O/ab*.jsonl <<'PY'
import json, sys, collections, statistics
t = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l); t[(r["causal"], r["s"])][r["variant"].replace("bf16.d64.bq192.bk128.", "")].append(r["tflops"])
for k in sorted(t):
    row = t[k]; c = "causal." if k[0] else ""
    ring, nopp = row[c + "wgmma"], row[c + "wgmma.nopp"]
    print(k, "ring", ring, "nopp", nopp, "median ratio %.3f" % (statistics.median(ring) / statistics.median(nopp)))
PY
OUT=$O/dc timeout 420 bash scripts/device-check.sh 2>&1 | tail -45
