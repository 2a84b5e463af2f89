#!/usr/bin/env bash
# Builds and runs every test: a Release build (CUDA backend on when nvcc is found), a program
# built against its installation (scripts/test-package.sh), then the suite under
# AddressSanitizer + UndefinedBehaviorSanitizer with CUDA off, so the two passes also cover
# both configurations (a machine without nvcc builds the second). Installs the
# Debian dependencies first; after the Release pass runs the Python package's tests against its
# libraries (scripts/test-python.sh: jax from PyPI in build/pyenv; scripts/test-torch.sh where
# python3 imports torch, else the torch tests are skipped, saying so), and at the end the fuzz
# targets for a bounded time. EJK_TEST_SANITIZERS=0, EJK_TEST_PYTHON=0 and EJK_TEST_FUZZ=0 skip
# those passes (quick local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
jobs=$(nproc)

# Each pass says how long it took: the CI budget is kept per pass.
pass_start=$SECONDS
pass() {  # name of the next pass
  [ -n "${pass_name:-}" ] && echo "  ${pass_name}: $((SECONDS - pass_start)) s"
  pass_name=$1 pass_start=$SECONDS
  [ -n "$1" ] && echo "== $1"
  return 0
}

# The AOT targets of specs/targets.yaml this host's CPU runs (the runtime picks the first that it
# supports: amx for flash, avx512 for the rest on an AMX host).
host_cpu_targets() {
  if grep -qw amx_tile /proc/cpuinfo; then echo "amx|avx512"
  elif grep -qw avx512f /proc/cpuinfo; then echo avx512
  elif grep -qw avx2 /proc/cpuinfo; then echo avx2
  else echo generic; fi
}

run_suite() {  # build dir, extra cmake args...
  local dir=$1; shift
  # Tests on explicitly: scripts/run-main.sh configures build/ with them off.
  cmake -S . -B "$dir" -G Ninja -DEJK_BUILD_TESTS=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  rm -rf "$dir/test-cache"
  (cd "$dir" && ctest --output-on-failure --no-tests=error -j "$jobs")
  # Skipped tests (the GPU ones on a machine without one) say why: Catch2's SKIP messages, from
  # ctest's log of the run.
  grep -h -A4 "SKIPPED:" "$dir/Testing/Temporary/LastTest.log" | grep -v "^--$" | sed 's/^/  skipped: /' || true
}

pass "Release build and tests"
run_suite build -DCMAKE_BUILD_TYPE=Release
if [ "${EJK_TEST_PYTHON:-1}" != 0 ]; then
  pass "Python package: JAX on the CPU (python/tests)"
  scripts/test-python.sh build
  if "${EJK_TORCH_PYTHON:-python3}" -c "import torch, numpy, pytest" 2>/dev/null; then
    pass "Python package: PyTorch (python/tests/test_torch*.py)"
    scripts/test-torch.sh build
  else
    echo "  skipped: the PyTorch tests: ${EJK_TORCH_PYTHON:-python3} has no torch (scripts/test-torch.sh runs them where it has)"
  fi
fi
pass "The installed package: examples/consumer against a cmake --install of the Release build"
scripts/test-package.sh build
if [ "${EJK_TEST_SANITIZERS:-1}" != 0 ]; then
  pass "AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
  # LLVM's shared libraries are not instrumented; their allocations are not ours to report.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # The CPU target this host runs is the only one pre-built (the others cost sanitized compile
  # time and never run here); anything else a test needs goes through the JIT.
  # -O1 with line tables only: stack traces keep file and line, and the sanitized build compiles
  # in under half the time of -O2 -g (Catch2's and CLI11's expansions dominate it).
  asan_flags="-O1 -g1 -DNDEBUG"
  run_suite build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEJK_SANITIZE=ON -DEJK_ENABLE_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$asan_flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$asan_flags" \
    -DEJK_VARIANTS="\\.cpu\\.($(host_cpu_targets))\\."
fi
if [ "${EJK_TEST_FUZZ:-1}" != 0 ]; then
  pass "libFuzzer targets (scripts/fuzz.sh: every target, bounded seconds each)"
  scripts/fuzz.sh "${EJK_FUZZ_SECONDS:-30}"
fi
pass ""
echo "  all passes: ${SECONDS} s"
