#!/usr/bin/env python3
"""The forward grid through the product path (bench_api row: the public C++ API back to back on
one stream, CUDA events), the same rows with the kernel alone, optionally a second build (an
older checkout's bench_api, for a before/after), and PyTorch SDPA's cuDNN and FlashAttention-2
in the same run, row by row over several passes so all see the same clock state.

  grid.py --new BENCH_API [--old BENCH_API] [--passes 2] [--d 64,128,256] [--s 1024,...]
          [--causal 0,1] [--out out/bench/api/grid]

Prints per row the medians over passes (TFLOP/s) and the ratios: ours / cuDNN, ours / FA2,
back to back / kernel alone, and new / old. Writes OUT/grid.jsonl.
"""
import argparse, json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cuda"))


def ours(binary, d, s, causal):
    out = subprocess.run([binary, "row", str(d), str(s), str(int(causal))], capture_output=True, text=True,
                         timeout=120)
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    if not rows:
        raise RuntimeError(f"{binary} d{d} s{s}: {out.stderr.strip()[-300:]}")
    return rows[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", required=True)
    ap.add_argument("--old")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--s", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--out", default="out/bench/api/grid")
    a = ap.parse_args()
    from bench_vs_peers import time_peers  # imports torch: after argument errors
    os.makedirs(a.out, exist_ok=True)
    lines = []
    rows = [(d, s, c) for d in map(int, a.d.split(",")) for c in map(int, a.causal.split(","))
            for s in map(int, a.s.split(","))]
    with open(os.path.join(a.out, "grid.jsonl"), "w") as f:
        for p in range(a.passes):
            for d, s, c in rows:
                r = {"pass": p, "d": d, "s": s, "causal": c}
                builds = [("new", a.new)] + ([("old", a.old)] if a.old else [])
                for name, binary in (builds if p % 2 == 0 else builds[::-1]):  # alternate who goes first
                    o = ours(binary, d, s, c)
                    r[name] = o["tflops"]
                    r[name + "_alone"] = o["alone_tflops"]
                peers = time_peers(s, d, bool(c))
                for k in ("cudnn", "flash2"):
                    r[k] = peers.get(k, {}).get("tflops")
                f.write(json.dumps(r) + "\n")
                f.flush()
                lines.append(r)
                print(json.dumps(r), file=sys.stderr)
    med = lambda rs, k: statistics.median(x[k] for x in rs) if all(x.get(k) for x in rs) else None
    ratio = lambda x, y: f"{x / y:.3f}" if x and y else "-"
    print(f"{'row':>16} {'new':>7} {'alone':>7} {'old':>7} {'cudnn':>7} {'fa2':>7}  {'x cuDNN':>7} {'x FA2':>6} "
          f"{'b2b/alone':>9} {'new/old':>7}")
    for d, s, c in rows:
        rs = [x for x in lines if (x["d"], x["s"], x["causal"]) == (d, s, c)]
        m = {k: med(rs, k) for k in ("new", "new_alone", "old", "cudnn", "flash2")}
        fmt = lambda v: f"{v:7.1f}" if v else "      -"
        print(f"d{d:<3} {'causal' if c else '':6} {s:5} {fmt(m['new'])} {fmt(m['new_alone'])} {fmt(m['old'])} "
              f"{fmt(m['cudnn'])} {fmt(m['flash2'])}  {ratio(m['new'], m['cudnn']):>7} {ratio(m['new'], m['flash2']):>6} "
              f"{ratio(m['new'], m['new_alone']):>9} {ratio(m['new'], m['old']):>7}")


if __name__ == "__main__":
    main()
