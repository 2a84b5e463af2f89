#!/usr/bin/env python3
"""Side by side: check_flash bench outputs of several builds timed in one call.

  compare_runs.py name=a.jsonl[,a2.jsonl ...] name=b.jsonl[,b2.jsonl ...] ...

Each build may bring several passes (files); a variant's TFLOP/s on a shape is the median over
them. One row per (D, S, causal): each build's best variant, then the ratio of each build to the
first. A second table: every variant that the first build and another one both timed (every
variant, given one build), with each build's median, the ratio to the first and the range over
the passes (per-variant A/B of builds; ab_twins.py compares twin variants inside one build).
"""
import collections, json, statistics, sys


def load(paths):
    """(d, causal, s, variant) -> TFLOP/s of each pass."""
    t = collections.defaultdict(list)
    for path in paths.split(","):
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                t[(r["d"], r["causal"], r["s"], r["variant"])].append(r["tflops"])
    return t


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    runs = []
    for arg in sys.argv[1:]:
        name, paths = arg.split("=", 1)
        runs.append((name, load(paths)))
    med = [{k: statistics.median(v) for k, v in t.items()} for _, t in runs]
    shapes = sorted({k[:3] for m in med for k in m})
    head = f"{'D':>4} {'S':>6} {'causal':>6} | " + " | ".join(f"{n:>28}" for n, _ in runs)
    print(head + " | " + " ".join(f"{'x' + n:>8}" for n, _ in runs[1:]))
    for shape in shapes:
        best = [max(((v, x) for k, x in m.items() if k[:3] == shape for v in [k[3]]),
                    key=lambda vx: vx[1], default=None) for m in med]
        cells = [f"{b[1]:7.1f} {b[0][-20:]:>20}" if b else f"{'-':>28}" for b in best]
        ratios = [f"{b[1] / best[0][1]:8.3f}" if b and best[0] else f"{'-':>8}" for b in best[1:]]
        d, c, s = shape
        print(f"{d:>4} {s:>6} {str(c):>6} | " + " | ".join(cells) + " | " + " ".join(ratios))
    print()
    print("every variant of", runs[0][0], "(median over passes; x: ratio to", runs[0][0] + ")")
    for key in sorted(med[0]):
        d, c, s, v = key
        cells = []
        for (name, t), m in zip(runs, med):
            if key in m:
                ratio = f" x{m[key] / med[0][key]:.3f}" if m is not med[0] else ""
                cells.append(f"{name} {m[key]:6.1f}{ratio} ({min(t[key]):.0f}-{max(t[key]):.0f})")
        if len(cells) > 1 or len(runs) == 1:
            print(f"{d:4d} {str(c):5s} {s:6d} {v:48s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
