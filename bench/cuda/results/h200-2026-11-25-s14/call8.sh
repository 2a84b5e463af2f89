#!/bin/bash
# Session 14 call 8: (a) with 8 MiB groups (v54) does the drawing 128 x 128 now beat the
# heuristic's 192 x 128 (static snake) at head_dim 64 causal 4k / 8k? Both variants in one
# bench process per shape, three passes (2k as the control where 128 x 128 is the default).
# (b) scripts/device-check.sh on the tree with v54's header (project build with CUDA on and the
# ORC JIT off: CUDA ctests, `ejk run --check` through the runtime, NVRTC cold and cache hit,
# compute-sanitizer memcheck / racecheck).
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
B=.carry/v54/check_flash
t0=$(date +%s)
for pass in 1 2 3; do
  for s in 2048 4096 8192; do
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=1 \
      EJK_BENCH_VARIANTS='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$' \
      timeout 60 $B bench >> $O/tiles.jsonl
  done
done
python3 - $O/tiles.jsonl <<'PY' | tee $O/tiles.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); by.setdefault((r["s"], r["variant"]), []).append(r["tflops"])
for (s, v), t in sorted(by.items()):
    print(f"{s:6} {v:36} {st.median(t):7.1f} ({min(t):.0f}-{max(t):.0f})")
PY
echo "tiles: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
OUT=$O timeout $(( 560 - ($(date +%s) - t0) )) bash scripts/device-check.sh > $O/log.txt 2>&1
tail -60 $O/log.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
