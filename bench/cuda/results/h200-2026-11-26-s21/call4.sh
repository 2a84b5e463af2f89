#!/bin/bash
# Session 21 call 4: the issue's whole benchmark on the session's final kernels (bench_issue.sh
# on .carry/v75; the grid's head_dims 64 / 128 / 256 run the same kernels as v74, session 20):
# check, the grid with the peers and the window rows against FlexAttention, JAX's cuDNN, the window
# rows through `ejk` (this tree's runtime), the paired grid (two passes), the plot.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
EJK_PREBUILT=.carry/v75 EJK_PAIRED_PASSES=2 OUT=$O timeout 575 bash bench/cuda/bench_issue.sh > $O/bench_issue.txt 2>&1
echo "rc=$?"
grep -E "PASS|FAIL|checks|==" $O/bench_issue.txt | head -20
cat $O/window.jsonl 2>/dev/null | cut -c1-300
cat $O/jax.jsonl 2>/dev/null | cut -c1-200
tail -32 $O/paired/table.txt 2>/dev/null
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
