#!/bin/bash
# Session 16 call 4, the final tree (v58 + v60): scripts/device-check.sh (project build with CUDA
# on and the ORC JIT off, CUDA ctests, `ejk run --check`, NVRTC cold and cache hit, sanitizers)
# and the GQA 32:8 window 1024 + softcap 30 rows through that build's `ejk run` beside
# FlexAttention.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
OUT=$O/dc timeout 470 bash scripts/device-check.sh > $O/device-check.txt 2>&1
echo "device-check: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
E=/tmp/ejk-build/cli/ejk
for s in 4096 8192 16384; do
  b=$((16384 / s))
  EJK_CACHE_DIR=/tmp/ejk-bench-cache timeout 30 $E run flash_attention --backend cuda --dtype bf16 --b $b --sq $s --sk $s \
    --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30 --iters 30 --json | tail -1 \
    | sed "s/^/{\"s\": $s, \"ours\": /; s/$/}/" >> $O/window.jsonl
  timeout 30 python3 bench/cuda/peers.py flash --b $b --hq 32 --hkv 8 --s $s --d 64 --causal --window 1024,0 --softcap 30 \
    2>/dev/null | sed "s/^/{\"s\": $s, \"peer\": /; s/$/}/" >> $O/window.jsonl
done
cut -c1-150 $O/window.jsonl
grep -E "tests passed|tests failed|PASS|FAIL|compile_ms|exit:|ERROR SUMMARY|RACECHECK SUMMARY|skipped|Skipped" $O/device-check.txt | cut -c1-200 | head -40
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
