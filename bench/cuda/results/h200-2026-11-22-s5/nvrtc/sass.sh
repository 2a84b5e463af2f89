#!/bin/bash
# SASS opcode histograms of two keys, session-4 headers (old) vs the working tree (new).
cd "$(dirname "$0")/../.."
R=$PWD
mk() {  # tree causal d bq bk
  cat > /tmp/k_$1_$3_$2.cu <<CU
#include "ejk/kernels/cuda/flash_fwd.cuh"
using Kernel = ejk::cuda::FlashFwdKernel<ejk::cuda::Arch::sm90a, ejk::cuda::Elem::bf16, $3, $4, $5,
    ejk::cuda::FlashFlags{.causal = $2}>;
extern "C" __global__ void __launch_bounds__(Kernel::kThreads, 1)
    k(const __grid_constant__ ejk::FlashFwdParams params, const __grid_constant__ ejk::cuda::FlashFwdTensorMaps maps) {
  Kernel::run(params, maps);
}
CU
  local inc=$R/kernels; [[ $1 == old ]] && inc=$R/.carry/nvrtc/old/kernels
  nvcc -std=c++20 -O3 -I $inc -arch=sm_90a -cubin /tmp/k_$1_$3_$2.cu -o /tmp/k_$1_$3_$2.cubin 2>/dev/null
  cuobjdump -sass /tmp/k_$1_$3_$2.cubin | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^\/\*[0-9a-f]+\*\/$/) {j = i + 1; if ($j ~ /^@/) j++; if ($j ~ /^[A-Z]/) print $j; break}}' | sed 's/\..*//; s/;//' | sort | uniq -c | sort -k2 > /tmp/h_$1_$3_$2.txt
  echo "$1 d$3 causal=$2: $(awk '{s+=$1} END {print s}' /tmp/h_$1_$3_$2.txt) instructions, cubin $(stat -c %s /tmp/k_$1_$3_$2.cubin) B"
}
for c in true false; do mk old $c 128 128 128; mk new $c 128 128 128; done
mk old true 64 128 128; mk new true 64 128 128
for x in "128_true" "64_true"; do
  echo "== opcode counts old -> new (d${x/_/ causal=}), changed only"
  join -1 2 -2 2 -a1 -a2 -e 0 -o 0,1.1,2.1 /tmp/h_old_$x.txt /tmp/h_new_$x.txt | awk '$2 != $3 {printf "%-12s %5d -> %5d\n", $1, $2, $3}'
done
