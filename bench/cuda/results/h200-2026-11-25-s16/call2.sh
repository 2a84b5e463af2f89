#!/bin/bash
# Session 16 call 2: the issue's grid paired with the SDPA peers (six passes) on main at
# 9dd4413 (v57's per-item causal order and v58 in; .carry/v58 = that tree's kernels), then
# JAX's cuDNN attention on the D=128 rows (bench_issue.sh's step 2).
cd "$(dirname "$0")/../../../.."
O=$OUT/c2; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
PYTHONUNBUFFERED=1 timeout 330 python3 bench/cuda/paired.py .carry/v58/check_flash $O/paired --passes 6 > $O/paired.txt 2>&1
echo "paired: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
for s in 4096 16384; do
  for c in "" "--causal"; do
    timeout 60 python3 bench/cuda/peers.py flash --b $((16384 / s)) --hq 16 --hkv 16 --s $s --d 128 $c 2>/dev/null \
      | grep jax_cudnn | sed "s/^/{\"s\": $s, \"causal\": \"$c\", \"row\": /; s/$/}/" >> $O/jax.jsonl
  done
done
echo "jax: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cut -c1-140 $O/paired.txt; cut -c1-200 $O/jax.jsonl
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
