#!/usr/bin/env python3
"""Is the first NVRTC compile of a process slower because of NVRTC's own start-up?
  first_compile.py [--trivial-first] [--d 128] [--causal] [--segments] [-- NVRTC options]
One process: optionally a trivial program first (timed), then the flash key three times
(cold: CUDA_CACHE_DISABLE=1), each compile's phases and wall time printed."""
import ctypes, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
import nvrtc_phases as m

os.environ["CUDA_CACHE_DISABLE"] = "1"
argv = sys.argv[1:]
extra = argv[argv.index("--") + 1:] if "--" in argv else []
argv = argv[:argv.index("--")] if "--" in argv else argv
trivial = "--trivial-first" in argv
class A: pass
a = A(); a.d = int(argv[argv.index("--d") + 1]) if "--d" in argv else 128; a.bq = a.bk = 128
for f in m.FLAGS: setattr(a, f, f"--{f}" in argv)
t0 = time.perf_counter(); lib = ctypes.CDLL("libnvrtc.so.13")
print(f"options {extra}; dlopen {1000 * (time.perf_counter() - t0):.0f} ms")
if trivial:
    ph, wall, *_ = m.compile_once(lib, b'extern "C" __global__ void ejk_warm() {}', extra)
    print(f"trivial: phases {[round(x) for x in ph]} wall {wall:.0f} ms")
src = m.render(a).encode()
for i in range(3):
    ph, wall, *_ = m.compile_once(lib, src, extra)
    print(f"flash d{a.d} run {i}: phases {[round(x) for x in ph]} wall {wall:.0f} ms")
