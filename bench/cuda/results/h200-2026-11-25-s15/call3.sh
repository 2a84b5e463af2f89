#!/bin/bash
# Session 15 call 3, the final tree (v55b's kernels + the heuristic's head_dim 64 non-causal
# 192 x 128 from 1k): the issue's grid paired with the SDPA peers (three passes, v55b's
# check_flash, the tree's spec); scripts/device-check.sh (project build with CUDA on and the
# ORC JIT off, CUDA ctests, `ejk run --check`, NVRTC cold and cache hit, sanitizers); the GQA
# 32:8 window 1024 + softcap 30 rows through that build's `ejk run` beside FlexAttention.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/paired.py .carry/v55b/check_flash $O/paired --passes 3 > $O/paired.txt 2>&1
echo "paired: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
OUT=$O/dc timeout $(( 480 - ($(date +%s) - t0) )) bash scripts/device-check.sh > $O/device-check.txt 2>&1
echo "device-check: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
E=/tmp/ejk-build/cli/ejk
for s in 4096 8192 16384; do
  b=$((16384 / s))
  EJK_CACHE_DIR=/tmp/ejk-bench-cache timeout 60 $E run flash_attention --backend cuda --dtype bf16 --b $b --sq $s --sk $s \
    --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30 --iters 30 --json | tail -1 \
    | sed "s/^/{\"s\": $s, \"ours\": /; s/$/}/" >> $O/window.jsonl
  timeout 60 python3 bench/cuda/peers.py flash --b $b --hq 32 --hkv 8 --s $s --d 64 --causal --window 1024,0 --softcap 30 \
    2>/dev/null | sed "s/^/{\"s\": $s, \"peer\": /; s/$/}/" >> $O/window.jsonl
done
cut -c1-150 $O/window.jsonl
cut -c1-130 $O/paired.txt
grep -E "tests passed|tests failed|PASS|FAIL|compile_ms|exit:|ERROR SUMMARY|RACECHECK SUMMARY|skipped|Skipped" $O/device-check.txt | cut -c1-200 | head -40
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
