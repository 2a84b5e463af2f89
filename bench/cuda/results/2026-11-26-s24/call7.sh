#!/bin/bash
# Session 24 call 7: SASS of d128 128x128 plain and bias (6eaf13b's kernels; the rendered
# templates carried in .carry/sass, as bench/cuda/nvrtc_phases.py renders them) for an
# instruction count of the bias tile loop.
cd "$(dirname "$0")/../../../.."
O=$OUT/c7; mkdir -p $O
for n in plain bias; do
  nvcc -cubin -std=c++20 -O3 -I kernels -gencode=arch=compute_90a,code=sm_90a .carry/sass/k_$n.cu -o $O/k_$n.cubin
  cuobjdump -sass $O/k_$n.cubin > $O/k_$n.sass
  wc -l $O/k_$n.sass
done
cd $OUT && tar czf c7.tgz c7 && rm -rf c7
