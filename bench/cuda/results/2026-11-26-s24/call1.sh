#!/bin/bash
# Session 24 call 1: the bias copy kernel (copy_bias_rows, flash_fwd_bias_rows.cuh).
# scripts/device-check.sh on the tree (CUDA ctests with the copy's bit-for-bit test, ejk run
# --check, memcheck / racecheck on a copied bias), memcheck on the copy test itself,
# runtime_smoke bias-copy (.carry/s24: ours against cuMemcpyDtoDAsync of the same bytes and the
# per-plane cuMemcpy2DAsync the runtime used before), and ejk run with a bias read in place (Sk
# 4096) and copied (4095).
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
OUT=$O timeout 420 bash scripts/device-check.sh > $O/device-check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; tail -45 $O/device-check.txt
B=/tmp/ejk-build
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/cuda/test_cuda_backend \
  "the bias copy keeps every row bit for bit at any alignment and stride" > $O/memcheck_copy.txt 2>&1
echo "memcheck copy test rc=$? ($(( $(date +%s) - t0 )) s)"; tail -4 $O/memcheck_copy.txt
timeout 60 .carry/s24/runtime_smoke bias-copy 2>&1 | tee $O/bias_copy.txt
for d in 64 128; do
  for sk in 4096 4095; do
    EJK_CACHE_DIR=/tmp/ejk-cache timeout 60 $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 \
      --sq 4096 --sk $sk --hq 16 --hkv 16 --d $d --bias --iters 20 --json 2>&1 | tail -1
  done
done | tee $O/ejk_bias.jsonl
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
