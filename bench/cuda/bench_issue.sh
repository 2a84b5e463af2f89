#!/usr/bin/env bash
# The CUDA flash forward benchmark of docs/perf.md in one call on the GPU machine, results under
# $OUT (default out/bench/cuda/issue):
#  1. the standalone check + bf16 grid (B*S = 16k, H*D = 2048, S 1k..16k, D 64/128/256,
#     causal and not) against PyTorch SDPA FlashAttention-2 and cuDNN, and the GQA 32:8,
#     window 1024 (causal), softcap 30 rows against FlexAttention, all timed the same way
#     (do_bench protocol, CUDA events; build_and_check.sh with EJK_BENCH_WINDOW=1);
#  2. JAX's cuDNN attention on the D=128 shapes;
#  3. the window rows again through the project's own `ejk` CLI (the product path: host timer
#     around a synchronized launch, median), beside peers.py's FlexAttention;
#  4. the grid again with the default key only, ours and the SDPA peers alternating row by row
#     over EJK_PAIRED_PASSES passes (default 3): the ratios to quote (bench/cuda/paired.py).
# Plot afterwards on any machine: python3 bench/cuda/plot.py $OUT (and $OUT/paired).
# EJK_ISSUE_CHECK=0 skips the check of step 1 (~240 s on an H100) in a call that follows a full
# check of the same binary: with it the whole script runs past 575 s on an H100.
# EJK_PREBUILT=dir: check_flash built elsewhere (build_and_check.sh build), carried over.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-out/bench/cuda/issue}
mkdir -p "$OUT"
# check first: build_and_check.sh stops before timing anything if the check fails
if [[ ${EJK_ISSUE_CHECK:-1} != 0 ]]; then
  bash bench/cuda/build_and_check.sh check 2>&1 | tail -8 || exit 1
fi
EJK_BENCH_WINDOW=1 bash bench/cuda/build_and_check.sh bench 2>&1 | tail -42
echo "== JAX cuDNN (D=128)"
for s in 4096 16384; do
  for c in "" "--causal"; do
    python3 bench/cuda/peers.py flash --b $((16384 / s)) --hq 16 --hkv 16 --s $s --d 128 $c 2>/dev/null \
      | grep jax_cudnn | sed "s/^/{\"s\": $s, \"causal\": \"$c\", \"row\": /; s/$/}/" | tee -a "$OUT/jax.jsonl"
  done
done
echo "== GQA 32:8, window 1024, softcap 30 (ours through ejk vs FlexAttention)"
B=/tmp/ejk-bench-build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_BUILD_TESTS=OFF \
  -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS='cuda.sm90a.bf16.d64.bq128.bk128.causal$' \
  -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" >"$OUT/cfg.log" 2>&1 && cmake --build $B -j 16 --target ejk_cli >"$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/cfg.log" "$OUT/build.log"; exit 1; }
for s in 4096 8192 16384; do
  b=$((16384 / s))
  EJK_CACHE_DIR=/tmp/ejk-bench-cache $B/cli/ejk run flash_attention --backend cuda --dtype bf16 --b $b --sq $s --sk $s \
    --hq 32 --hkv 8 --d 64 --causal --window 1024,0 --softcap 30 --iters 30 --json | tail -1 \
    | sed "s/^/{\"s\": $s, \"ours\": /; s/$/}/" | tee -a "$OUT/window.jsonl"
  python3 bench/cuda/peers.py flash --b $b --hq 32 --hkv 8 --s $s --d 64 --causal --window 1024,0 --softcap 30 \
    2>/dev/null | sed "s/^/{\"s\": $s, \"peer\": /; s/$/}/" | tee -a "$OUT/window.jsonl"
done
echo "== the grid, default key and peers alternating row by row (paired.py)"
mkdir -p "$OUT/paired"
python3 bench/cuda/paired.py "${EJK_PREBUILT:-${EJK_BIN_DIR:-out/bench/cuda/bin}}/check_flash" "$OUT/paired" \
  --passes "${EJK_PAIRED_PASSES:-3}" | tee "$OUT/paired/table.txt"
