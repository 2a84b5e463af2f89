#!/bin/bash
# Session 25 call 3: scripts/device-check.sh on the TMA-staged bias (2984d85 + its device test), then `ejk run`
# with a bias read in place (Sk 4096) and copied (4095), d64 and d128, and the softcap window
# GQA row at 4k through ejk.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
OUT=$O timeout 450 bash scripts/device-check.sh > $O/device-check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -E "tests passed|tests failed|check\":\"(fail|pass)" $O/device-check.txt | cut -c1-160 | sort | uniq -c | head; grep -E "exit:|SUMMARY|compile_ms" $O/device-check.txt | cut -c1-200
B=/tmp/ejk-build
for d in 64 128; do
  for sk in 4096 4095; do
    EJK_CACHE_DIR=/tmp/ejk-cache timeout 60 $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 \
      --sq 4096 --sk $sk --hq 16 --hkv 16 --d $d --bias --iters 20 --json 2>&1 | tail -1
  done
done | tee $O/ejk_bias.jsonl
EJK_CACHE_DIR=/tmp/ejk-cache timeout 60 $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 4 --sq 4096 \
  --sk 4096 --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30 --iters 30 --json 2>&1 | tail -1 | tee $O/ejk_window.jsonl
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
