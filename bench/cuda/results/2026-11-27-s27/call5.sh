#!/bin/bash
# Session 27 call 5 (same warm H100 as call 4): two rows of call 4's grid again with seven passes:
# d128 non-causal 8k (call 4: 1.047x cuDNN, range 1.001-1.156 over three passes; cuDNN read 635
# TFLOP/s there against 607 / 612 at 4k / 16k) and d64 causal 1k (1.583x FA2).
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
timeout 200 python3 bench/cuda/paired.py .carry/d26/check_flash $O/d128 --passes 7 --d 128 --s 8192 --causal 0 > $O/d128.txt 2>&1
tail -3 $O/d128.txt
timeout 200 python3 bench/cuda/paired.py .carry/d26/check_flash $O/d64 --passes 7 --d 64 --s 1024 --causal 1 > $O/d64.txt 2>&1
tail -3 $O/d64.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
