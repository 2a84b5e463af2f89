#!/bin/bash
# Session 21 call 6: the paired grid again, three passes (call 5's one pass took 29 s).
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
timeout 140 python3 bench/cuda/paired.py .carry/v75/check_flash $O/paired --passes 3 > $O/table.txt 2>&1
echo "rc=$?"; tail -32 $O/table.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
