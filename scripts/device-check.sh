#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, nvcc 13, no LLVM, no network): build the project with the
# ORC JIT off and CUDA on, run the CUDA tests, the CLI on the GPU with --check, an NVRTC cold
# compile and cache-hit timing, and compute-sanitizer on a few cases.
# Needs the header-only packages absent there, carried in .carry/deps (see bench/README.md):
#   mkdir -p .carry/debs && (cd .carry/debs && apt-get download libcli11-dev libxxhash-dev) &&
#   for f in .carry/debs/*.deb; do dpkg -x $f .carry/deps; done
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ejk-out}
mkdir -p "$OUT"
B=/tmp/ejk-build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS="${EJK_CUDA_ARCHS:-90a}" -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" >"$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build $B -j 16 >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
echo "== tests"
(cd $B && ctest -j 4 --output-on-failure -R 'cuda|CUDA|errors|built-in' 2>&1 | tail -25)
echo "== ejk run --backend cuda --check"
export EJK_CACHE_DIR=/tmp/ejk-cache
E=$B/cli/ejk
# Each option once per line (the CLI rejects a repeated option with a usage error).
sq="--sq 2048 --sk 2048"
for args in "--b 1 $sq --hq 16 --hkv 16 --d 128 --causal" "--b 1 $sq --hq 16 --hkv 16 --d 64" \
            "--b 1 $sq --hq 16 --hkv 16 --d 256 --causal" \
            "--b 1 $sq --hq 32 --hkv 8 --d 96 --window 1024,0 --softcap 30" \
            "--b 2 --sq 1000 --sk 777 --hq 16 --hkv 16 --d 128 --sinks --segments --bias" \
            "--b 3 $sq --hq 16 --hkv 16 --d 80 --varlen" "--b 1 $sq --hq 16 --hkv 16 --d 160 --causal" \
            "--b 1 --sq 4096 --sk 4096 --hq 16 --hkv 16 --d 128" "--b 1 --sq 4096 --sk 4096 --hq 16 --hkv 16 --d 128 --causal" \
            "--b 1 $sq --hq 16 --hkv 16 --d 64 --causal" \
            "--b 1 --sq 8192 --sk 8192 --hq 8 --hkv 8 --d 128 --causal" \
            "--b 3 --sq 1000 --sk 1000 --hq 8 --hkv 8 --d 128 --varlen" \
            "--b 3 --sq 1000 --sk 1000 --hq 8 --hkv 2 --d 64 --varlen --causal" \
            "--b 2 $sq --hq 32 --hkv 8 --d 32" "--b 1 --sq 1500 --sk 1500 --hq 16 --hkv 16 --d 48 --causal --softcap 30" \
            "--b 1 --sq 4096 --sk 4096 --hq 8 --hkv 8 --d 96 --causal" "--b 1 $sq --hq 8 --hkv 8 --d 192" \
            "--b 2 --sq 1024 --sk 1024 --hq 8 --hkv 8 --d 128 --causal --bias" \
            "--b 2 --sq 1500 --sk 1501 --hq 8 --hkv 4 --d 64 --causal --bias"; do
  $E run flash_attention --backend cuda --dtype bf16 $args --iters 3 --check --json 2>&1 | tail -1
done
$E run flash_attention --backend auto --dtype f16 --sq 512 --sk 512 --d 128 --check --json | tail -1
echo "== NVRTC cold compile, then cache hit"
rm -rf /tmp/ejk-cache2
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 112 --causal --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_80 --d 112 --json
# Segment ids are a key flag (.seg): never in the AOT set, so this one is an NVRTC compile.
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 128 --causal --segments --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E run flash_attention --backend cuda --dtype bf16 --d 112 --causal --sq 256 --sk 256 --iters 1 --json | tail -1
EJK_CACHE_DIR=/tmp/ejk-cache2 $E run flash_attention --backend cuda --dtype bf16 --d 112 --causal --sq 256 --sk 256 --iters 1 --json | tail -1
echo "== compute-sanitizer"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 $E run flash_attention --backend cuda --dtype bf16 --b 1 \
    --sq 200 --sk 333 --hq 4 --hkv 2 --d 128 --causal --window 64,8 --softcap 20 --sinks --segments --bias --iters 1 --check \
    2>&1 | tail -3
  echo "$tool exit: $?"
done
