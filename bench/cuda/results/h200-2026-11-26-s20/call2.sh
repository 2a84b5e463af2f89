#!/bin/bash
# Session 20 call 2: scripts/device-check.sh on v71 (CMake build with CUDA on, the CUDA ctests
# with the d160 config added to the random device test, `ejk run --check` (d96 window softcap,
# d80 varlen and d160 causal now JIT-compile the padded wgmma kernels), `ejk compile`, sanitizers).
# Carry .carry/deps.
OUT=/tmp/o2 bash scripts/device-check.sh > /tmp/dc.txt 2>&1; echo rc=$?
mkdir -p $OUT/c2 && cp /tmp/dc.txt $OUT/c2/ && cp -r /tmp/o2/* $OUT/c2/ 2>/dev/null; tail -60 /tmp/dc.txt
