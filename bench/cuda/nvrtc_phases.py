#!/usr/bin/env python3
"""Where a cold NVRTC compile of one sm90a flash variant spends its time, per phase.

  nvrtc_phases.py [--d 128] [--bq 128] [--bk 128] [--causal] [--segments] [--sinks] [--bias] [--per_item]
                  [--window] [--softcap] [--runs 5] [--each] [--log] [--ptx FILE] [--cubin FILE] [-- extra NVRTC options]

From the repository root, on any machine with libnvrtc.so.13 (no GPU needed): renders
templates/flash_fwd.cuda.cu.tmpl for the variant, compiles it `--runs` times with the runtime's
options (runtime/src/cuda/nvrtc_compiler.cpp; --no-cache: a repeated program is compiled again
rather than answered from the driver's compute cache) plus NVRTC's `--time`, and prints the
median of each phase (front end, NVVM optimizer, PTX translation = ptxas) and of the total,
and the cubin's size and SHA-256 prefix (a refactor that should not change the code: compare
them before and after with the same options, as the reviews of sessions 15 and 16 did).
--each also prints every compile in order (the first of a process is the product's cold case:
`ejk compile` is one compile per process) with the CPU time and page faults it took.
The headers come from kernels/ on disk, not embedded: the compile is the same.
"""
import argparse, ctypes, hashlib, os, re, resource, statistics, sys, tempfile, time

FLAGS = ("causal", "window", "segments", "softcap", "sinks", "bias", "per_item")


def render(a):
    text = open("templates/flash_fwd.cuda.cu.tmpl").read()
    values = {"banner": "// nvrtc_phases.py", "key": "nvrtc_phases", "target": "sm90a",
              "dtype": "bf16", "head_dim": a.d, "block_q": a.bq, "block_k": a.bk, "symbol": "kern"}
    values.update({f: "true" if getattr(a, f) else "false" for f in FLAGS})
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(values[m.group(1)]), text)


def program_bytes(lib, prog, what):
    """One of the program's outputs ("ProgramLog", "CUBIN", "PTX") through its size + get pair."""
    n = ctypes.c_size_t()
    getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    getattr(lib, f"nvrtcGet{what}")(prog, buf)
    return buf


def compile_once(lib, src, extra):
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"variant.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    with tempfile.TemporaryDirectory() as tmp:
        times = os.path.join(tmp, "times.csv")  # NVRTC appends to an existing file
        opts = ["--gpu-architecture=sm_90a", "-std=c++20", "--ptxas-options=-v", "-default-device",
                "-DNDEBUG", "--no-cache", "-Ikernels", f"-I{cuda}/include", f"--time={times}"] + extra
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        u0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
        wall = 1000 * (time.perf_counter() - t0)
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        usage = (1000 * (u1.ru_utime - u0.ru_utime), 1000 * (u1.ru_stime - u0.ru_stime),
                 u1.ru_minflt - u0.ru_minflt, u1.ru_majflt - u0.ru_majflt)
        log = program_bytes(lib, prog, "ProgramLog").value.decode()
        if rc != 0:
            sys.exit(log[:3000])
        cubin = program_bytes(lib, prog, "CUBIN")
        ptx = program_bytes(lib, prog, "PTX")
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        # A header line, then "file, phase, value, ms" per phase.
        phases = [float(l.split(",")[2]) for l in open(times).read().splitlines()[1:] if l.strip()]
    return phases, wall, cubin.raw, log, ptx.value, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--bq", type=int, default=128)
    ap.add_argument("--bk", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--each", action="store_true", help="also print each compile, in order, with its rusage")
    ap.add_argument("--log", action="store_true", help="print the last compile's log (ptxas -v)")
    ap.add_argument("--ptx", help="write the last compile's PTX to this file")
    ap.add_argument("--cubin", help="write the last compile's cubin to this file (text_hash.py compares code)")
    for f in FLAGS:
        ap.add_argument(f"--{f}", action="store_true")
    a, extra = ap.parse_known_args()
    extra = [e for e in extra if e != "--"]
    os.environ["CUDA_CACHE_DISABLE"] = "1"
    lib = ctypes.CDLL("libnvrtc.so.13")
    src = render(a).encode()
    runs = [compile_once(lib, src, extra) for _ in range(a.runs)]
    med = lambda xs: statistics.median(xs)
    names = ("front end", "NVVM", "ptxas")
    cols = "  ".join(f"{n} {med([r[0][i] for r in runs]):.0f}" for i, n in enumerate(names))
    walls = sorted(r[1] for r in runs)
    flags = ".".join(f for f in FLAGS if getattr(a, f)) or "plain"
    print(f"d{a.d} bq{a.bq} bk{a.bk} {flags}: {cols}  ms; wall median {med(walls):.0f} "
          f"(min {walls[0]:.0f}, max {walls[-1]:.0f}) over {a.runs} cold compiles; cubin "
          f"{len(runs[0][2])} B sha256 {hashlib.sha256(runs[0][2]).hexdigest()[:16]}")
    if a.each:
        for i, r in enumerate(runs):
            user, sys_, minflt, majflt = r[5]
            print(f"  compile {i}: " + "  ".join(f"{n} {v:.0f}" for n, v in zip(names, r[0])) +
                  f"  wall {r[1]:.0f} ms; cpu user {user:.0f} sys {sys_:.0f} ms; "
                  f"page faults {minflt} minor {majflt} major")
    if a.log:
        print(runs[-1][3])
    if a.ptx:
        open(a.ptx, "wb").write(runs[-1][4])
    if a.cubin:
        open(a.cubin, "wb").write(runs[-1][2])


if __name__ == "__main__":
    main()
