#!/bin/bash
# Session 20 call 8: scripts/device-check.sh on the final commit (v74): the CMake build with CUDA
# on, the CUDA ctests, `ejk run --check` (head_dim 64 causal 2k now takes the drawing 192 x 128
# AOT kernel), NVRTC cold compiles and cache hits, sanitizers. Carry .carry/deps.
OUT=/tmp/o8 timeout 540 bash scripts/device-check.sh > /tmp/dc.txt 2>&1; echo rc=$?
mkdir -p $OUT/c8 && cp /tmp/dc.txt $OUT/c8/; tail -45 /tmp/dc.txt
