#!/bin/bash
# Session 21 call 3: scripts/device-check.sh on the session's code (CMake build with the new AOT
# keys d96 128x160 causal / 128x128 causal per item / d192 128x96; CUDA ctests incl. the random
# device test's d32 / d48 configs; `ejk run --check` incl. d32 GQA, d48 causal softcap, d96 causal
# 4k, d192), then the new d96 / d192 defaults paired with PyTorch SDPA (two passes; paired.py
# takes the rule's tile, persistent: the per-item flag at d96 causal 16k is not its to set).
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
t0=$(date +%s)
OUT=$O timeout 420 bash scripts/device-check.sh > $O/dc.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^\s*$" $O/dc.txt | tail -60
B=.carry/v75/check_flash
for d in 96 192; do
  left=$(( 570 - ($(date +%s) - t0) ))
  [[ $left -gt 40 ]] && timeout $left python3 bench/cuda/paired.py $B $O/paired$d --passes 2 --d $d > $O/paired$d.txt 2>&1; tail -12 $O/paired$d.txt
  echo "paired d$d done ($(( $(date +%s) - t0 )) s)"
done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
