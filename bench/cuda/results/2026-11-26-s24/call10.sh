#!/bin/bash
# Session 24 call 10: the issue's GQA 32:8, window 1024 (causal), softcap 30 rows (d64, B*S =
# 16k) after n24 (which changed the softcap keys' softmax): ours by check_flash bench (.carry/n24:
# the final kernels; CUDA events, L2 cleared, median, as do_bench) against FlexAttention by
# peers.py in the same call, row by row.
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
for s in 4096 8192 16384; do
  EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 EJK_BENCH_D=64 EJK_BENCH_S=$s timeout 60 .carry/n24/check_flash bench \
    > $O/ours_$s.jsonl 2>&1
  timeout 150 python3 bench/cuda/peers.py flash --b $((16384 / s)) --hq 32 --hkv 8 --s $s --d 64 --causal \
    --window 1024,0 --softcap 30 --peer torch_flex > $O/flex_$s.jsonl 2>$O/flex_$s.err
  echo "S=$s ($(( $(date +%s) - t0 )) s)"
done
python3 - $O <<'PY'
import json, sys, glob
o = sys.argv[1]
for s in (4096, 8192, 16384):
    ours = [json.loads(l) for l in open(f"{o}/ours_{s}.jsonl") if l.startswith("{")]
    flex = [json.loads(l) for l in open(f"{o}/flex_{s}.jsonl") if l.startswith("{")]
    f = next((r for r in flex if "fwd_ms" in r), None)
    for r in ours:
        ratio = f["fwd_ms"] / r["ms"] if f else float("nan")
        print(f"S={s:>5} {r['variant']:<40} ours {r['ms']:.4f} ms  flex {f['fwd_ms'] if f else float('nan'):.4f} ms  x{ratio:.2f}")
PY
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
