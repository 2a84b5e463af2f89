#!/bin/bash
# Session 8 call 2: confirmation of v25 (.carry/v25b: Q in registers with 16 registers of
# headroom, so 128 x 144 keeps Q in shared memory) on the issue's grid, plus the GQA 32:8 +
# window 1024 + softcap 30 rows now timed by check_flash (CUDA events, do_bench protocol)
# against FlexAttention; PyTorch SDPA FA2 / cuDNN in the same call; a second pass of ours.
cd "$(dirname "$0")/../../../.."
B=.carry/v25b/check_flash; O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
timeout 120 $B check 20261121 > $O/check.txt || { tail -3 $O/check.txt; echo CHECK FAILED; exit 1; }; tail -1 $O/check.txt
EJK_PERSISTENT_GRID=3 timeout 200 $B check-bench $RANDOM > $O/check_bench.txt || { grep -v ^PASS $O/check_bench.txt | head; echo CHECK FAILED; exit 1; }; tail -1 $O/check_bench.txt
export EJK_BENCH_VARIANTS=d64.bq192.bk128.wgmma,d64.bq192.bk128.causal.wgmma,d64.bq128.bk128,d128.bq128.bk128,d128.bq128.bk144,d128.bq128.bk192.causal.wgmma,d256.bq128.bk80.wgmma,d256.bq128.bk80.causal.wgmma,d64.bq192.bk128.causal.window
EJK_BENCH_WINDOW=1 timeout 150 $B bench > $O/ours1.jsonl
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/bench_vs_peers.py $O/ours1.jsonl $O/peers.jsonl 2>&1 | grep -v Warning | tee $O/table.txt
EJK_BENCH_WINDOW=1 timeout 150 $B bench > $O/ours2.jsonl
python3 bench/cuda/ab_twins.py .qsmem $O/ours1.jsonl $O/ours2.jsonl | tee $O/ab_qsmem.txt
python3 bench/cuda/ab_twins.py .qreg $O/ours1.jsonl $O/ours2.jsonl | tee $O/ab_qreg.txt
python3 - $O/ours1.jsonl $O/ours2.jsonl <<'PY' | tee $O/d128_tiles.txt
import json, sys, statistics, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l)
        if r["d"] == 128 and "window" not in r: t[(r["causal"], r["s"], r["variant"])].append(r["tflops"])
for c in (False, True):
    for s in (1024, 2048, 4096, 8192, 16384):
        row = {v.replace("bf16.d128.bq128.", ""): statistics.median(x) for (cc, ss, v), x in t.items() if cc == c and ss == s}
        print(c, s, "  ".join(f"{k}={v:.0f}" for k, v in sorted(row.items(), key=lambda kv: -kv[1])))
PY
echo "== JAX cuDNN (D=128)"
for s in 4096 16384; do for c in "" "--causal"; do
  timeout 60 python3 bench/cuda/peers.py flash --b $((16384 / s)) --hq 16 --hkv 16 --s $s --d 128 $c --peer jax 2>/dev/null | grep jax_cudnn | sed "s/^/{\"s\": $s, \"causal\": \"$c\", \"row\": /; s/$/}/" | tee -a $O/jax.jsonl
done; done
