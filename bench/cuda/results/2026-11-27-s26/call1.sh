#!/bin/bash
# Session 26 call 1: where a d64 item's time goes now (phase probe build p26 = main 4176c08 with
# -DEJK_SM90_PROBE) on the default 128x128 keys, causal 1k / 2k / 16k and non-causal 1k / 16k,
# and the same rows timed without the probe (b26 = main), two runs each.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
cat $O/gpu.txt
for run in 1 2; do
for c in 1 0; do for s in 1024 2048 16384; do
  for b in p26 b26; do
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=$c EJK_BENCH_VARIANTS='d64.bq128.bk128.causal.wgmma$,d64.bq128.bk128.wgmma$' \
      timeout 60 .carry/$b/check_flash bench >> $O/$b.txt 2>&1
  done
done; done; done
python3 - $O <<'PY'
import json, sys
for b in ("b26", "p26"):
    for l in open(f"{sys.argv[1]}/{b}.txt"):
        if not l.startswith("{"): continue
        j = json.loads(l); pr = j.get("probe", {})
        print(b, j["variant"], j["s"], f'{j["tflops"]:.1f}', " ".join(f"{k}={v}" for k, v in pr.items()))
PY
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
