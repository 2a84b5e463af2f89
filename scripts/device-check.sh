#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, nvcc 13, no LLVM, no network): build with the ORC JIT off and
# CUDA on, run every test that can run there (the GPU ones included), the CLI on the GPU with
# --check for every op, an NVRTC cold compile and a cache hit, libejk inside a Python process
# with PyTorch (loaded before and after `import torch`), and compute-sanitizer on a few cases.
# Needs the header-only packages absent there, carried in .carry/deps:
#   mkdir -p .carry/debs && (cd .carry/debs && apt-get download libcli11-dev libxxhash-dev) &&
#   for f in .carry/debs/*.deb; do dpkg -x $f .carry/deps; done
# EJK_VARIANTS narrows the AOT set (default: the whole spec's for EJK_CUDA_ARCHS, default 90a).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ejk-out}
mkdir -p "$OUT"
B=/tmp/ejk-build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS="${EJK_CUDA_ARCHS:-90a}" -DEJK_VARIANTS="${EJK_VARIANTS:-}" -DEJK_HIDE_SYMBOLS=ON \
  -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $B -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
echo "== tests"
(cd $B && ctest -j 4 --output-on-failure 2>&1 | tail -25)
echo "== ejk run --backend cuda --check"
export EJK_CACHE_DIR=/tmp/ejk-cache
E=$B/cli/ejk
sq="--sq 2048 --sk 2048"
for args in "--b 1 $sq --hq 16 --hkv 16 --d 128 --causal" "--b 1 $sq --hq 16 --hkv 16 --d 64" \
            "--b 1 $sq --hq 16 --hkv 16 --d 256 --causal" \
            "--b 1 $sq --hq 32 --hkv 8 --d 96 --window 1024,0 --softcap 30" \
            "--b 2 --sq 1000 --sk 777 --hq 16 --hkv 16 --d 128 --sinks --segments --bias" \
            "--b 2 --sq 1000 --sk 777 --hq 16 --hkv 16 --d 128 --shared-sinks --num-sinks 3" \
            "--b 3 $sq --hq 16 --hkv 16 --d 80 --varlen" "--b 1 $sq --hq 16 --hkv 16 --d 160 --causal" \
            "--b 1 --sq 8192 --sk 8192 --hq 8 --hkv 8 --d 128 --causal" \
            "--b 3 --sq 1000 --sk 1000 --hq 8 --hkv 2 --d 64 --varlen --causal" \
            "--b 2 --sq 1500 --sk 1501 --hq 8 --hkv 4 --d 64 --causal --bias"; do
  $E run flash_attention --backend cuda --dtype bf16 $args --iters 3 --check --json 2>&1 | tail -1
done
for args in "merge_attention_states --t 4096 --h 32 --d 128" "merge_attention_states --batch 3 --t 77 --h 5 --d 100" \
            "mean_pooling --b 8 --t 65536 --d 1024 --varlen" "mean_pooling_backward --b 4 --t 8192 --d 512"; do
  $E run $args --backend cuda --dtype bf16 --iters 3 --check --json 2>&1 | tail -1
done
echo "== NVRTC cold compile, then cache hit"
rm -rf /tmp/ejk-cache2
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 112 --causal --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 128 --causal --segments --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E run flash_attention --backend cuda --dtype bf16 --d 112 --causal --sq 256 --sk 256 --iters 1 --json | tail -1
echo "== libejk in a Python process with PyTorch"
EJK_CACHE_DIR=/tmp/ejk-cache3 python3 tests/device/python_process.py $B/runtime/libejk.so
echo "== compute-sanitizer"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 $E run flash_attention --backend cuda --dtype bf16 --b 1 \
    --sq 200 --sk 333 --hq 4 --hkv 2 --d 128 --causal --window 64,8 --softcap 20 --sinks --segments --bias --iters 1 --check \
    2>&1 | tail -3
  echo "$tool exit: $?"
done
