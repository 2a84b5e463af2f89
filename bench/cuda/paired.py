#!/usr/bin/env python3
"""The benchmark grid of docs/perf.md with our default key and the peers timed row by row, in several passes.

  paired.py CHECK_FLASH [OUT_DIR] [--passes N] [--d 64,128,256] [--s 1024,...] [--causal 0,1]

For each pass and each (D, S, causal) of the grid (bf16, B*S = 16k, H*D = 2048): the variant the
spec's sm90a heuristic picks (bench_vs_peers.default_config), timed by `CHECK_FLASH bench` in a
subprocess, then PyTorch SDPA's cuDNN and FlashAttention-2 backends (bench_vs_peers.time_peers),
so ours and the peers alternate at the same temperature and clock state. The grid of
bench_issue.sh times every variant of a shape before any peer, minutes apart: at head_dim 128
non-causal from 4k ours read 2-4% lower there than in this protocol while cuDNN read the same
(docs/design/flash_fwd_cuda.md, "How it is measured"). Writes OUT_DIR/paired.jsonl (default
out/bench/cuda/paired; one line per row and pass) and prints per row the medians over passes,
the ratios of the medians and each ratio's range over the passes (> 1: ours faster).
"""
import argparse, json, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PEERS = ("cudnn", "flash2")


def ours(binary, name, d, s, causal):
    """TFLOP/s of variant `name` on one shape (check_flash bench's JSON line)."""
    env = dict(os.environ, EJK_BENCH_D=str(d), EJK_BENCH_S=str(s), EJK_BENCH_CAUSAL=str(int(causal)),
               EJK_BENCH_VARIANTS=name + "$", EJK_BENCH_WINDOW="0")
    out = subprocess.run([binary, "bench"], env=env, capture_output=True, text=True, timeout=120)
    rows = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    if not rows:
        raise RuntimeError(f"{name} S={s}: no timing from {binary}: {out.stderr.strip()[-300:]}")
    return rows[0]["tflops"]


def medians(lines):
    """(d, causal, s) -> (the row's lines over passes, median TFLOP/s of ours and each peer)."""
    by = {}
    for r in lines:
        by.setdefault((r["d"], r["causal"], r["s"]), []).append(r)
    return {key: (rs, {k: statistics.median(r[k] for r in rs) for k in ("ours",) + PEERS})
            for key, rs in by.items()}


def table(lines):
    print(f"{'D':>4} {'S':>6} {'causal':>6} | {'ours':>6} {'cuDNN':>6} {'FA2':>6} | {'x cuDNN':>7} {'range':>11} |"
          f" {'x FA2':>5} {'range':>11} | variant")
    for (d, causal, s), (rs, med) in sorted(medians(lines).items()):
        def cell(p):
            per = [r["ours"] / r[p] for r in rs]
            return f"{med['ours'] / med[p]:{7 if p == 'cudnn' else 5}.3f} {min(per):5.3f}-{max(per):5.3f}"
        print(f"{d:>4} {s:>6} {str(causal):>6} | {med['ours']:6.1f} {med['cudnn']:6.1f} {med['flash2']:6.1f} |"
              f" {cell('cudnn')} | {cell('flash2')} | {rs[0]['variant']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary"); ap.add_argument("out", nargs="?", default="out/bench/cuda/paired")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--d", default="64,128,256")
    ap.add_argument("--s", default="1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    a = ap.parse_args()
    import bench_vs_peers as bvp  # torch: only to time (plot.py reads medians() without it)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "paired.jsonl")
    lines = []
    with open(path, "w") as f:
        for p in range(a.passes):
            for d in map(int, a.d.split(",")):
                for c in map(int, a.causal.split(",")):
                    for s in map(int, a.s.split(",")):
                        name = bvp.default_name(s, d, bool(c))
                        tf = ours(a.binary, name, d, s, bool(c))
                        peers = bvp.time_peers(s, d, bool(c))
                        r = {"pass": p, "d": d, "s": s, "causal": bool(c), "variant": name, "ours": tf,
                             **{k: v.get("tflops", float("nan")) for k, v in peers.items()}}
                        f.write(json.dumps(r) + "\n"); f.flush()
                        lines.append(r)
    table(lines)


if __name__ == "__main__":
    main()
