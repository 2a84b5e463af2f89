#!/bin/bash
# Session 18 call 12: the `.items` tuning flag (one block per work item, chosen by the heuristic
# for head_dim 64 causal from 16k). scripts/device-check.sh on this tree (its CUDA tests now run
# per-item keys too), then through `ejk run`: the 16k key with --check, and the heuristic's key
# (.items) against the same tile forced (--block-q 192 --block-k 128: persistent), alternating.
cd "$(dirname "$0")/../../../.."
O=$OUT/c12; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
OUT=$O bash scripts/device-check.sh > $O/device-check.txt 2>&1
grep -E "tests passed|Failed|FAIL|exit:|ERROR SUMMARY|RACECHECK" $O/device-check.txt | head
E=/tmp/ejk-build/cli/ejk
export EJK_CACHE_DIR=/tmp/ejk-cache
$E run flash_attention --backend cuda --dtype bf16 --b 1 --sq 16384 --sk 16384 --hq 2 --hkv 1 --d 64 --causal \
  --iters 1 --check --json 2>&1 | tail -1 | tee $O/check16k.json
for rep in 1 2 3; do
  for mode in items forced; do
    extra=""; [ $mode = forced ] && extra="--block-q 192 --block-k 128"
    $E run flash_attention --backend cuda --dtype bf16 --b 1 --sq 16384 --sk 16384 --hq 32 --hkv 32 --d 64 \
      --causal $extra --iters 30 --json 2>&1 | tail -1 | tee -a $O/ab16k.jsonl | cut -c1-220
  done
done
cd $OUT && tar czf c12.tgz c12 && rm -rf c12
