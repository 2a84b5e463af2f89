#!/usr/bin/env bash
# On the GPU machine: a before/after of the CUDA flash forward in one lease. Builds this tree and
# an older one (unpacked from `git archive` into a git-ignored folder that travels with the call)
# with the ORC JIT off and a narrowed AOT set, then, by step:
#   build   both libraries, the CUDA tests and both bench_api binaries (build-dev/, build-old/)
#   test    the CUDA tests (ctest -R cuda), `ejk run --check` on the device-check problems,
#           compute-sanitizer memcheck and racecheck on one case with every feature
#   grid    bench/api/grid.py, new against old, paired row by row in the same process
#   bench/cuda/device_paired.sh OLD_TREE STEP... (logs and results under $OUT)
# Needs .carry/deps (CLI11 and xxhash headers, see scripts/device-check.sh's header).
set -uo pipefail
cd "$(dirname "$0")/../.."
old_src=$1; shift
OUT=${OUT:-/tmp/ejk-out}
mkdir -p "$OUT"
# The grid's keys (bf16, sm90a; bench/api/grid.py's rows pick them by the spec's heuristic), every
# CPU key (no JIT here) and every non-flash CUDA key, named by family (EJK_VARIANTS patterns have
# no lookahead); the tests JIT the other flash keys by NVRTC.
keys='\.cpu\.|^(mean_pool|merge_states|flash_fwd_bias_rows|recurrent)|^flash_fwd\.cuda\.sm90a\.bf16\.(d64\.bq128\.bk128\.causal$|d64\.bq192\.bk128(\.causal(\.items)?)?$|d128\.bq128\.bk128(\.causal)?$|d128\.bq128\.bk192\.causal$|d256\.bq128\.bk80(\.causal)?$)'

configure_build() {  # SRC BUILD_DIR TARGETS...
  local src=$1 b=$2; shift 2
  cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
    -DEJK_CUDA_ARCHS=90a -DEJK_VARIANTS="$keys" -DEJK_BUILD_TESTS=ON -DEJK_HIDE_SYMBOLS=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" > "$b.configure.log" 2>&1 || { tail -20 "$b.configure.log"; return 1; }
  cmake --build "$b" -j 8 --target "$@" > "$b.build.log" 2>&1 || { grep -E "error|Error" "$b.build.log" | head -20; return 1; }
}

for step in "$@"; do
  case $step in
  build)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
    start=$(date +%s)
    configure_build . build-dev all > "$OUT/build_dev.txt" 2>&1 &
    configure_build "$old_src" build-old ejk > "$OUT/build_old.txt" 2>&1 &
    wait %1; rc_new=$?; wait %2; rc_old=$?
    cat "$OUT/build_dev.txt" "$OUT/build_old.txt"
    echo "builds: new rc $rc_new, old rc $rc_old, $(( $(date +%s) - start )) s"
    [[ $rc_new == 0 && $rc_old == 0 ]] || exit 1
    bench/api/build.sh . build-dev build-dev/bench_api && bench/api/build.sh "$old_src" build-old build-old/bench_api || exit 1
    ;;
  test)
    (cd build-dev && ctest -R "cuda|CUDA|kernels\." -j 8 --output-on-failure > "$OUT/ctest.log" 2>&1; echo "ctest rc $?")
    grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped" "$OUT/ctest.log" | tail -15
    E=build-dev/cli/ejk
    export EJK_CACHE_DIR=/tmp/ejk-cache
    sq="--sq 2048 --sk 2048"
    for args in "--b 1 $sq --hq 16 --hkv 16 --d 128 --causal" "--b 1 $sq --hq 16 --hkv 16 --d 64" \
                "--b 1 $sq --hq 16 --hkv 16 --d 256 --causal" \
                "--b 1 $sq --hq 32 --hkv 8 --d 96 --window 1024,0 --softcap 30" \
                "--b 2 --sq 1000 --sk 777 --hq 16 --hkv 16 --d 128 --sinks --segments --bias" \
                "--b 2 --sq 1000 --sk 777 --hq 16 --hkv 16 --d 128 --shared-sinks --num-sinks 3" \
                "--b 3 $sq --hq 16 --hkv 16 --d 80 --varlen" "--b 1 $sq --hq 16 --hkv 16 --d 160 --causal" \
                "--b 1 --sq 8192 --sk 8192 --hq 8 --hkv 8 --d 128 --causal" \
                "--b 1 --sq 16384 --sk 16384 --hq 8 --hkv 8 --d 64 --causal" \
                "--b 3 --sq 1000 --sk 1000 --hq 8 --hkv 2 --d 64 --varlen --causal" \
                "--b 2 --sq 1500 --sk 1501 --hq 8 --hkv 4 --d 64 --causal --bias"; do
      echo "$args: $($E run flash_attention --backend cuda --dtype bf16 $args --iters 3 --check --json 2>&1 | tail -1)"
    done | tee "$OUT/check.log"
    for tool in memcheck racecheck; do
      compute-sanitizer --tool $tool --error-exitcode 9 $E run flash_attention --backend cuda --dtype bf16 --b 1 \
        --sq 200 --sk 333 --hq 4 --hkv 2 --d 128 --causal --window 64,8 --softcap 20 --sinks --segments --bias \
        --iters 1 --check > "$OUT/sanitizer_$tool.log" 2>&1
      echo "$tool exit: $? $(tail -2 "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
      compute-sanitizer --tool $tool --error-exitcode 9 $E run flash_attention --backend cuda --dtype bf16 --b 2 \
        --sq 1000 --sk 1000 --hq 4 --hkv 4 --d 64 --causal --iters 1 --check >> "$OUT/sanitizer_$tool.log" 2>&1
      echo "$tool (d64 causal, persistent drawn items) exit: $? $(tail -2 "$OUT/sanitizer_$tool.log" | tr '\n' ' ')"
    done
    ;;
  grid)
    PYTHONUNBUFFERED=1 python3 bench/api/grid.py --new build-dev/bench_api --old build-old/bench_api --passes 2 \
      --out "$OUT/grid" 2> "$OUT/grid_rows.log"
    ;;
  esac
done
