#!/bin/bash
# Session 13 call 3: scripts/device-check.sh on the tree after v48 (project build with CUDA on
# and the ORC JIT off: CUDA ctests, among them the new drawn-items test on one and two streams;
# `ejk run --check` on the GPU, whose persistent causal keys now draw their items through the
# runtime's per-stream counter; NVRTC cold compile and cache hit; compute-sanitizer).
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/c3
OUT=$OUT/c3 timeout 560 bash scripts/device-check.sh 2>&1 | tail -70 | tee $OUT/c3/log.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
