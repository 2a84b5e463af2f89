#!/usr/bin/env bash
# Session 27 call 1: is a process's first NVRTC compile (the product's cold case: `ejk compile`
# compiles once per process) slower on the device host, and where does it go (CPU user / sys,
# page faults)? Three keys, four fresh processes each, three compiles per process; then the
# segment key with glibc's malloc on transparent huge pages (GLIBC_TUNABLES).
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
{
nproc; lscpu | grep -E "Model name|MHz|Hypervisor" ; cat /sys/kernel/mm/transparent_hugepage/enabled
ldd --version | head -1; uptime
for flags in "--causal" "--causal --segments" "--causal --bias"; do
  for p in 1 2 3 4; do python3 bench/cuda/nvrtc_phases.py --d 128 $flags --runs 3 --each; done
done
for p in 1 2 3 4; do
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python3 bench/cuda/nvrtc_phases.py --d 128 --causal --segments --runs 3 --each
done
} 2>&1 | tee $OUT/first_compile.txt
# The product path: main built as scripts/device-check.sh builds it, then `ejk compile` cold (an
# empty cache each time), four processes per key, alternating with the huge-page malloc.
B=/tmp/ejk-build
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DEJK_ENABLE_ORC_JIT=OFF -DEJK_ENABLE_CUDA=ON \
  -DEJK_CUDA_ARCHS=90a -DCMAKE_PREFIX_PATH="$PWD/.carry/deps/usr" >$OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
cmake --build $B -j 16 --target ejk_cli >$OUT/build.log 2>&1 || { grep -E "error|Error" $OUT/build.log | head; exit 1; }
python3 - $B/cli/ejk <<'PY' 2>&1 | tee $OUT/ejk_compile.txt
import json, os, resource, shutil, subprocess, sys
ejk = sys.argv[1]
for r in range(4):
    for flags in (["--d", "112", "--causal"], ["--d", "128", "--causal", "--segments"],
                  ["--d", "128", "--causal", "--bias"], ["--d", "128", "--causal", "--segments", "--sinks", "--bias"]):
        for tun in ("", "glibc.malloc.hugetlb=1"):
            shutil.rmtree("/tmp/c1", ignore_errors=True)
            env = dict(os.environ, EJK_CACHE_DIR="/tmp/c1", GLIBC_TUNABLES=tun)
            u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run([ejk, "compile", "flash_attention", "--backend", "cuda", "--arch", "sm_90a",
                                  *flags, "--json"], env=env, capture_output=True, text=True)
            u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            j = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r} {j['key']} tun={tun or '-'} compile_ms {j['compile_ms']:.0f}; process user "
                  f"{1000 * (u1.ru_utime - u0.ru_utime):.0f} sys {1000 * (u1.ru_stime - u0.ru_stime):.0f} ms, "
                  f"{u1.ru_minflt - u0.ru_minflt} minor faults", flush=True)
PY
# As run, call 1 built --target ejk (the library) and the ejk_compile part failed: no cli/ejk. Fixed above (ejk_cli); call 2 timed the product path instead.
