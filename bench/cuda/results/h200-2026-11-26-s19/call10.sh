#!/bin/bash
# Session 19 call 10: the issue's whole benchmark on the final kernels (bench_issue.sh on v68,
# .carry/v68 = main's kernels at 4617e74): check, the grid with the peers and the window rows against FlexAttention, JAX's
# cuDNN, the window rows through `ejk` (this tree's runtime), the paired grid (two passes).
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
EJK_PREBUILT=.carry/v68 EJK_PAIRED_PASSES=2 OUT=$O timeout 560 bash bench/cuda/bench_issue.sh > $O/bench_issue.txt 2>&1
echo "rc=$?"
grep -E "PASS|FAIL|checks|==" $O/bench_issue.txt | head -20
cat $O/window.jsonl 2>/dev/null | cut -c1-300
cat $O/jax.jsonl 2>/dev/null | cut -c1-200
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
