#!/usr/bin/env python3
"""Replays the hardening campaign against a built tree and counts outcomes per class.

Every case is a command a clumsy user or an attacker could run: mutated CLI options for every op
(`ejk list`), damaged `--load` folders, hostile `--save` targets, environment values, damaged
cache entries and bundles, pathological patterns, and C ABI calls through ctypes. Each outcome is
one of: ok (ran, and passed --check where asked), refused (exit 1 or 2 with a one-line message),
internal (exit 3 "internal error"), wrong (exit 0 but --check failed or output is not finite),
crash (a signal or a sanitizer report) or hang (past the time limit). Exits 1 when any case is
internal, wrong, crash or hang, printing those cases.

  scripts/harden_campaign.py BUILD_DIR [--quick]     (BUILD_DIR: a Release or ASan+UBSan build)
"""
import argparse
import collections
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

SPECS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "specs")
BAD = ("internal", "wrong", "crash", "hang")
# Values for every option that takes one (CLI11 types them all TEXT): integers at the edges, floats
# outside f32, pairs with overflowing ends, dtypes the op lacks, garbage.
VALUES = ["0", "-1", "2147483648", "9223372036854775807", "nan", "1e300", "1e-300", "-inf", "9223372036854775808",
          "1", "3", "1.5", "abc", "", "0,9223372036854775807", "9223372036854775807,9223372036854775807", "-1,0",
          "u8", "f64", "a" * 300]
ENV = {
    "EJK_CACHE_DIR": ["", "~", "/proc/self", "/dev/null", "relative/dir", "x" * 5000],
    "EJK_NUM_THREADS": ["0", "-1", "abc", "99999999999", "1.5", ""],
    "EJK_TUNING": ["2", "yes", "", "-1"],
    "EJK_AUTOTUNE": ["2", "on", ""],
    "EJK_BUNDLE_PATH": ["/nonexistent", "/dev/null", "/proc/self/mem", "", ":::"],
    "EJK_CPU_TARGET": ["sm90a", "avx9000", "", "generic,avx2"],
    "EJK_DISABLE_JIT": ["2", "yes", ""],
    "EJK_CACHE_LOCK_TIMEOUT_S": ["-1", "1e300", "nan", "abc", ""],
    "EJK_CPU_STAGE_KV": ["2", "x", ""],
}


class Campaign:
    def __init__(self, build, work, timeout):
        self.ejk = os.path.join(build, "cli", "ejk")
        self.gen = os.path.join(build, "generator", "ejk-gen")
        self.lib = os.path.join(build, "runtime", "libejk.so")
        self.work, self.timeout = work, timeout
        self.counts = collections.defaultdict(collections.Counter)
        self.failures = []
        # glibc's heap checks stand in for ASan in a Release build.
        self.env = dict(os.environ, EJK_CACHE_DIR=os.path.join(work, "cache"), MALLOC_CHECK_="3", MALLOC_PERTURB_="165",
                        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")

    def classify(self, proc, check):
        out, err = proc.stdout, proc.stderr
        if proc.returncode < 0 or "Sanitizer" in err or "runtime error:" in err:
            return "crash"
        if "wrong:" in err:
            return "wrong"
        if proc.returncode == 3 or "internal error" in err:
            return "internal"
        # --check exits 1 past tolerance: a wrong result, not a refusal.
        if check and proc.returncode in (0, 1) and ("FAIL" in out or re.search(r"\bnan\b", out, re.I)):
            return "wrong"
        if proc.returncode == 0:
            return "ok"
        message = err.strip() or out.strip()
        if proc.returncode in (1, 2) and message:
            return "refused" if len(err) < 4000 else "internal"
        return "crash"

    def run(self, cls, argv, env=None, check=False):
        try:
            # In the campaign's folder: relative paths it passes (EJK_CACHE_DIR=relative/dir) land there.
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=self.timeout,
                                  env=env or self.env, stdin=subprocess.DEVNULL, cwd=self.work)
            outcome = self.classify(proc, check)
            detail = (proc.stderr or proc.stdout)[-300:]
        except subprocess.TimeoutExpired:
            outcome, detail = "hang", ""
        self.counts[cls][outcome] += 1
        if outcome in BAD:
            self.failures.append((cls, outcome, " ".join(argv)[:300], detail))
        return outcome

    def ops(self):
        listing = subprocess.run([self.ejk, "list"], capture_output=True, text=True, env=self.env).stdout
        names, name = [], None
        for line in listing.splitlines():
            if " (kernel family " in line:
                name = line.split()[0]
            elif name is not None:
                if "(internal" not in line:
                    names.append(name)
                name = None
        return names

    def problems(self, op):
        path = os.path.join(os.path.dirname(__file__), "..", "cli", "cases", op + ".problems")
        with open(path) as f:
            return [line.split() for line in f if line.strip() and not line.startswith("#")]

    def options(self, op):
        text = subprocess.run([self.ejk, "run", op, "--help"], capture_output=True, text=True, env=self.env).stdout
        return sorted(set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)(?:\s+(TEXT))?", text, re.M)))

    def cli(self, op, quick):
        base = self.problems(op)[0]
        for opt, kind in self.options(op):
            if opt in ("--save", "--load", "--json", "--check", "--help"):
                continue
            values = VALUES if kind else []
            if not values:
                self.run("cli", [self.ejk, "run", op] + base + [opt, "--iters", "1", "--check"], check=True)
                self.run("cli", [self.ejk, "run", op] + base + [opt + "=2", "--iters", "1"])
            # A huge --iters is a long run the user asked for, not a defect.
            iters = [] if opt == "--iters" else ["--iters", "1"]
            for v in values[: 6 if quick else None]:
                if opt == "--iters" and v.isdigit() and int(v) > 3:
                    continue
                self.run("cli", [self.ejk, "run", op] + base + [opt, v] + iters + ["--check"], check=True)
        for problem in self.problems(op):
            self.run("cli", [self.ejk, "run", op] + problem + ["--iters", "1", "--check"], check=True)

    def load(self, op):
        saved = os.path.join(self.work, "saved-" + op)
        if self.run("load", [self.ejk, "run", op] + self.problems(op)[0] + ["--iters", "1", "--save", saved]) != "ok":
            return
        with open(os.path.join(saved, "params.json")) as f:
            params = json.load(f)
        mutations = []
        for key in params:
            for v in ("u8", "uint8", -1, 2 ** 63, 1e300, None, [], {}, "x" * 100, True):
                mutations.append({**params, key: v})
        mutations.append(functools_nest(60000))
        for i, m in enumerate(mutations):
            folder = os.path.join(self.work, "load", f"{op}-{i}")
            shutil.copytree(saved, folder)
            with open(os.path.join(folder, "params.json"), "w") as f:
                f.write(m if isinstance(m, str) else json.dumps(m))
            self.run("load", [self.ejk, "run", op, "--load", folder, "--iters", "1", "--check"], check=True)
        for npy in [n for n in os.listdir(saved) if n.endswith(".npy")]:
            for descr in ("|u1", "<f2", "<i8", "<f8", ">f4", "|b1", "<c8"):
                folder = os.path.join(self.work, "load", f"{op}-{npy}-{descr[1:]}")
                shutil.copytree(saved, folder)
                path = os.path.join(folder, npy)
                with open(path, "rb") as f:
                    data = f.read()
                data = re.sub(rb"'descr': '[^']*'", f"'descr': '{descr}'".encode(), data, count=1)
                with open(path, "wb") as f:
                    f.write(data)
                self.run("load", [self.ejk, "run", op, "--load", folder, "--iters", "1", "--check"], check=True)
            for cut in (0, 10, 60):
                folder = os.path.join(self.work, "load", f"{op}-{npy}-cut{cut}")
                shutil.copytree(saved, folder)
                path = os.path.join(folder, npy)
                os.truncate(path, min(cut, os.path.getsize(path)))
                self.run("load", [self.ejk, "run", op, "--load", folder, "--iters", "1"])
        for kind in ("fifo", "dir", "symlink"):
            folder = os.path.join(self.work, "load", f"{op}-{kind}")
            shutil.copytree(saved, folder)
            target = os.path.join(folder, "params.json")
            os.remove(target)
            {"fifo": os.mkfifo, "dir": os.mkdir, "symlink": lambda p: os.symlink("/dev/zero", p)}[kind](target)
            self.run("load", [self.ejk, "run", op, "--load", folder, "--iters", "1"])

    def save(self, op):
        args = [self.ejk, "run", op] + self.problems(op)[0] + ["--iters", "1", "--save"]
        victim = os.path.join(self.work, "victim")
        with open(victim, "w") as f:
            f.write("keep")
        trap = os.path.join(self.work, "trap-" + op)
        os.makedirs(trap)
        os.symlink(victim, os.path.join(trap, "params.json"))
        ro = os.path.join(self.work, "ro-" + op)
        os.makedirs(ro)
        os.chmod(ro, stat.S_IRUSR | stat.S_IXUSR)
        for target in (trap, ro, "/proc/ejk", "/dev/null", "/dev/full", os.path.join(self.work, "n" * 300)):
            self.run("save", args + [target])
        with open(victim) as f:
            if f.read() != "keep":
                self.counts["save"]["wrong"] += 1
                self.failures.append(("save", "wrong", "--save followed a symlink", ""))

    def environment(self, op):
        for var, values in ENV.items():
            for v in values:
                self.run("env", [self.ejk, "run", op] + self.problems(op)[0] + ["--iters", "1"], env={**self.env, var: v})

    def patterns(self):
        for p in ("(.*)*X", "(" * 20000 + ")" * 20000, "(a|aa)*b" * 10, "[", "\\", "a{99999}", "((((((((((x))))))))))*"):
            self.run("pattern", [self.ejk, "bundle", "build", "--out", os.path.join(self.work, "p.ejkb"), "--variants", p])
            self.run("pattern", [self.gen, "list", "--specs", SPECS, "--variants", p])

    def cache_and_bundles(self):
        """A JIT-compiled variant (head dim 24 is in no AOT set) puts an entry in the cache."""
        cache = os.path.join(self.work, "cache")
        problem = [self.ejk, "run", "flash_attention", "--b", "1", "--sq", "16", "--sk", "16", "--hq", "1",
                   "--hkv", "1", "--d", "24", "--iters", "1", "--check"]
        self.run("cache", problem, check=True)
        entries = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs
                   if not f.startswith(".") and os.path.getsize(os.path.join(d, f)) > 128]
        for path in entries[:3]:
            with open(path, "rb") as f:
                data = bytearray(f.read())
            for pos in sorted({0, 8, 64, 104, 110, 119, len(data) // 2, len(data) - 1}):
                if pos >= len(data):
                    continue
                flipped = bytearray(data)
                flipped[pos] ^= 0x5A
                with open(path, "wb") as f:
                    f.write(flipped)
                self.run("cache", [self.ejk, "cache", "verify"])
                self.run("cache", problem, check=True)
            with open(path, "wb") as f:
                f.write(data)
        bundle = os.path.join(self.work, "b.ejkb")
        if self.run("bundle", [self.ejk, "bundle", "build", "--out", bundle, "--variants", r"^mean_pool_fwd\.cpu"]) != "ok":
            return
        with open(bundle, "rb") as f:
            data = f.read()
        for pos in range(0, len(data), max(1, len(data) // 40)):
            damaged = bytearray(data)
            damaged[pos] ^= 0xFF
            path = os.path.join(self.work, "damaged.ejkb")
            with open(path, "wb") as f:
                f.write(damaged)
            self.run("bundle", [self.ejk, "bundle", "verify", path])
        for cut in (0, 16, len(data) // 3, len(data) - 1):
            path = os.path.join(self.work, "cut.ejkb")
            with open(path, "wb") as f:
                f.write(data[:cut])
            self.run("bundle", [self.ejk, "bundle", "verify", path])

    def c_abi(self):
        code = C_ABI_CASES.replace("@PYTHON@", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        for case in range(len(C_ABI_NAMES)):
            self.run("c_abi", [sys.executable, "-c", code, str(case)],
                     env={**self.env, "EJK_LIBRARY_DIR": os.path.dirname(self.lib)})

    def report(self):
        classes = ["ok", "refused"] + list(BAD)
        print(f"{'class':10}" + "".join(f"{c:>10}" for c in classes))
        for cls, counter in self.counts.items():
            print(f"{cls:10}" + "".join(f"{counter[c]:>10}" for c in classes))
        total = sum(sum(c.values()) for c in self.counts.values())
        print(f"{total} cases")
        for cls, outcome, cmd, detail in self.failures[:50]:
            print(f"- {cls} {outcome}: {cmd}\n    {detail.strip()[-200:]}")
        return 1 if self.failures else 0


def functools_nest(depth):
    """A params.json nested `depth` deep: the loader bounds JSON depth."""
    return "[" * depth + "]" * depth


C_ABI_NAMES = ["context struct_size 65536", "context struct_size 0", "output with stride 0", "nan soft cap",
               "negative dim", "argument given twice", "register 2^62 variants", "null args", "rank 9"]
C_ABI_CASES = r"""
import ctypes, sys
import numpy as np
sys.path.insert(0, "@PYTHON@")
from ejk import _lib
L = _lib.libejk()
case = int(sys.argv[1])
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 16, 2, 64), (1, 16, 1, 64), (1, 16, 1, 64)))
o = np.full_like(q, np.nan)

def call(out_strides=None, q_shape=None, extra=(), size=ctypes.sizeof(_lib.Context)):
    a = _lib.ArgList()
    a.tensor("q", q_shape or q.shape, "float32", q.ctypes.data)
    a.tensor("k", k.shape, "float32", k.ctypes.data).tensor("v", v.shape, "float32", v.ctypes.data)
    a.tensor("out", o.shape, "float32", o.ctypes.data)
    if out_strides is not None:
        a._args[-1].tensor.contents.strides = (ctypes.c_int64 * 4)(*out_strides)
    for name, kind, value in extra:
        a.scalar(name, kind, value)
    array, n = a.array()
    ctx = _lib.Context(size, _lib.BACKEND_CPU, None, None, None)
    return L.ejk_run(b"flash_attention", array, n, ctypes.byref(ctx))

if case == 0:   rc = call(size=65536)
elif case == 1: rc = call(size=0)
elif case == 2: rc = call(out_strides=(0, 0, 0, 0))
elif case == 3: rc = call(extra=[("logits_soft_cap", _lib.ARG_FLOAT, float("nan"))])
elif case == 4: rc = call(q_shape=(1, -16, 2, 64))
elif case == 5: rc = call(extra=[("causal", _lib.ARG_BOOL, 1), ("causal", _lib.ARG_BOOL, 0)])
elif case == 6: rc = L.ejk_register_cpu_variants(b"x", None, ctypes.c_size_t(2 ** 62))
elif case == 7: rc = L.ejk_run(b"flash_attention", None, 5, None)
else:           rc = call(q_shape=(1,) * 9)
message = L.ejk_last_error().decode()
if rc == 0 and not np.isfinite(o).all():
    sys.exit("wrong: success with a non-finite output")
sys.stderr.write(f"rc {rc}: {message}\n")
sys.exit(0 if rc == 0 else (3 if "internal" in message else 1))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true", help="fewer values per option")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--ops", nargs="*", help="only these ops (default: every op `ejk list` names)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ejk-campaign-") as work:
        os.chmod(work, 0o700)
        c = Campaign(os.path.abspath(a.build), work, a.timeout)
        for op in a.ops or c.ops():
            print(f"== {op}", flush=True)
            c.cli(op, a.quick)
            c.load(op)
            c.save(op)
            c.environment(op)
        c.cache_and_bundles()
        c.patterns()
        c.c_abi()
        sys.exit(c.report())


if __name__ == "__main__":
    main()
