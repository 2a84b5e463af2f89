#!/bin/bash
# Session 15 call 4: head_dim 256 causal 128 x 80, one block per item (the default) against
# persistent blocks that draw their items in 8 MiB head groups (v54's order; v20 measured
# persistent +4.5 / +2.6% at 1k / 2k before draws existed). One bench process per variant and
# shape, three passes, the first variant alternating by pass (v55b's check_flash).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
B=.carry/v55b/check_flash
t0=$(date +%s)
for pass in 1 2 3; do
  vs='bf16.d256.bq128.bk80.causal.wgmma$ bf16.d256.bq128.bk80.causal.wgmma.persist$'
  (( pass % 2 == 0 )) && vs='bf16.d256.bq128.bk80.causal.wgmma.persist$ bf16.d256.bq128.bk80.causal.wgmma$'
  for s in 1024 2048 4096 8192 16384; do
    for v in $vs; do
      EJK_BENCH_D=256 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS=$v timeout 60 $B bench >> $O/d256.jsonl
    done
  done
done
python3 - $O/d256.jsonl <<'PY' | tee $O/d256.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); by.setdefault((r["s"], r["variant"]), []).append(r["tflops"])
for (s, v), t in sorted(by.items()):
    print(f"{s:6} {v:44} {st.median(t):7.1f} ({min(t):.0f}-{max(t):.0f})")
PY
echo "total: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
