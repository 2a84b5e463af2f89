#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) in build-fuzz/ with clang-19 + ASan + UBSan and runs each
# for a bounded time, starting from the committed seeds (fuzz/corpus/<target>) and past crash
# inputs (tests/fuzz/<target>). Fails on the first target that crashes, leaks memory past
# libFuzzer's limits or hangs; the input is left in build-fuzz/crashes/<target>/ (commit it
# under tests/fuzz/<target>/, where the fuzz.replay.<target> ctest runs it from then on).
#
#   scripts/fuzz.sh [seconds-per-target] [target...]   (default 60 s, every target)
#   targets: expr spec npy cache_entry payload_check bundle load cli_parse pattern c_args
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(expr spec npy cache_entry payload_check bundle load cli_parse pattern c_args)

scripts/setup-deps.sh
# libFuzzer's runtime for clang-19 is a package of its own.
if [ ! -e /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libclang-rt-19-dev >/dev/null
fi

cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-19 >/dev/null
cmake --build build-fuzz -j "$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  seeds=(fuzz/corpus/"$t")
  [ -d "tests/fuzz/$t" ] && seeds+=("tests/fuzz/$t")
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  echo "== fuzz_$t for ${seconds} s"
  # New inputs go to the first directory (build-fuzz/corpus), which later runs start from.
  if ! "build-fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$t/" \
      "${dict[@]}" "build-fuzz/corpus/$t" "${seeds[@]}" 2>"build-fuzz/fuzz_$t.log"; then
    tail -n 60 "build-fuzz/fuzz_$t.log"
    echo "fuzz_$t failed; the input is in build-fuzz/crashes/$t/" >&2
    exit 1
  fi
  grep -E "^Done |stat::new_units_added" "build-fuzz/fuzz_$t.log" | sed "s/^/  /"
done
