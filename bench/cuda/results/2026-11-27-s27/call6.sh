#!/bin/bash
# Session 27 call 6 (same warm H100 as calls 4-5): d64 causal 1k alone, three more runs of seven
# passes each (call 4 in the grid: 1.583x FA2 over three passes; call 5 alone: 1.612 over seven).
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
for r in 1 2 3; do
  timeout 150 python3 bench/cuda/paired.py .carry/d26/check_flash $O/d64_$r --passes 7 --d 64 --s 1024 --causal 1 > $O/d64_$r.txt 2>&1
  tail -1 $O/d64_$r.txt
done
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
