#!/usr/bin/env bash
# On the GPU machine (Ubuntu 24.04, nvcc 13, no LLVM, no network): build with the ORC JIT off and
# CUDA on, run every test that can run there (the GPU ones included), the CLI on the GPU with
# --check for every op (its problems: cli/cases/<op>.device) and each op's own checks
# (cli/cases/<op>.device.sh: e.g. NVRTC cold compiles, compute-sanitizer), and libejk inside a
# Python process with PyTorch (loaded before and after `import torch`).
# Needs the header-only packages absent there, carried in .carry/deps:
#   mkdir -p .carry/debs && (cd .carry/debs && apt-get download libcli11-dev libxxhash-dev) &&
#   for f in .carry/debs/*.deb; do dpkg -x $f .carry/deps; done
# EJK_VARIANTS narrows the AOT set (default: the whole spec's for EJK_CUDA_ARCHS, default 90a);
# EJK_DEVICE_OPS (a regex of op names) narrows the CLI problems to those ops; EJK_CTEST_JOBS sets
# ctest's parallelism (default 4).
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
(cd $B && ctest -j "${EJK_CTEST_JOBS:-4}" --output-on-failure >"$OUT/ctest.log" 2>&1; tail -25 "$OUT/ctest.log")
echo "== ejk run --backend cuda --check"
export EJK_CACHE_DIR=/tmp/ejk-cache
E=$B/cli/ejk
# Every op `ejk list` names with a cuda backend but internal ones (companion kernels, which `ejk list` marks on the
# line after the op's): the problems in cli/cases/<op>.device (one a line), else the case's
# default problem; then each op's own checks, cli/cases/<op>.device.sh.
ops=$($E list | awk '/ \(kernel family /{name=$1; cuda=($0 ~ /backends: [^)]*cuda/); next}
  name!=""{if ($0 !~ /\(internal/ && cuda) print name; name=""}')
for op in $ops; do
  [[ $op =~ ${EJK_DEVICE_OPS:-.} ]] || continue
  problems=cli/cases/$op.device
  if [ -f "$problems" ]; then
    grep -v '^#' "$problems" | grep -v '^[[:space:]]*$' | while read -r args; do
      # shellcheck disable=SC2086  # the line is a list of options
      $E run "$op" $args --backend cuda --dtype bf16 --iters 3 --check --json </dev/null 2>&1 | tail -1
    done
  else
    $E run "$op" --backend cuda --dtype bf16 --iters 3 --check --json 2>&1 | tail -1
  fi
done
for checks in cli/cases/*.device.sh; do
  [ -f "$checks" ] && E=$E OUT=$OUT bash "$checks"
done
echo "== libejk in a Python process with PyTorch"
EJK_CACHE_DIR=/tmp/ejk-cache3 python3 tests/device/python_process.py $B/runtime/libejk.so
