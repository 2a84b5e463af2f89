#!/bin/bash
# NVRTC cold compile (CUDA_CACHE_DISABLE=1, one process per compile), session-4 headers (old, 668a2c2)
# vs the working tree (new), alternating, three rounds.
cd "$(dirname "$0")/../.."
R=$PWD
export CUDA_CACHE_DISABLE=1
for round in 1 2 3; do
  for k in flash_fwd.cuda.sm90a.bf16.d128.bq128.bk128.causal flash_fwd.cuda.sm90a.bf16.d128.bq128.bk128 \
           flash_fwd.cuda.sm90a.bf16.d64.bq128.bk128.causal flash_fwd.cuda.sm90a.f16.d64.bq128.bk64 \
           flash_fwd.cuda.sm90a.bf16.d256.bq128.bk64.causal.win.cap.sink.bias; do
    (cd $R/.carry/nvrtc/old && $R/.carry/nvrtc/runtime_smoke compile $k | tail -1 | sed "s/^/old /")
    (cd $R && $R/.carry/nvrtc/runtime_smoke compile $k | tail -1 | sed "s/^/new /")
  done
done | tee $OUT/nvrtc.txt
python3 - <<'PY'
import os, re, collections
t = collections.defaultdict(list)
for l in open(os.environ["OUT"] + "/nvrtc.txt"):
    f = l.split()
    if len(f) > 3 and f[3] == "ms": t[(f[1], f[0])].append(float(f[2]))
for (k, tree) in sorted(t):
    v = sorted(t[(k, tree)]); print(f"{tree} {k:60s} min {v[0]:6.0f} median {v[len(v)//2]:6.0f} ms")
PY
