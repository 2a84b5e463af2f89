#!/usr/bin/env python3
"""Side by side: check_flash bench outputs of several builds timed in one call.

  compare_runs.py name=a.jsonl name=b.jsonl ...

One row per (D, S, causal): each build's best TFLOP/s and variant, then the ratio of each build
to the first. A second table lists every variant of the first build (per-variant A/B).
"""
import json, sys


def load(path):
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    return rows


def main():
    runs = []
    for arg in sys.argv[1:]:
        name, path = arg.split("=", 1)
        runs.append((name, load(path)))
    shapes = sorted({(r["d"], r["causal"], r["s"]) for _, rows in runs for r in rows})
    head = f"{'D':>4} {'S':>6} {'causal':>6} | " + " | ".join(f"{n:>28}" for n, _ in runs)
    print(head + " | " + " ".join(f"{'x' + n:>8}" for n, _ in runs[1:]))
    for d, c, s in shapes:
        best = []
        for _, rows in runs:
            cand = [r for r in rows if (r["d"], r["causal"], r["s"]) == (d, c, s)]
            best.append(max(cand, key=lambda r: r["tflops"]) if cand else None)
        cells = [f"{b['tflops']:7.1f} {b['variant'][-20:]:>20}" if b else f"{'-':>28}" for b in best]
        ratios = [f"{b['tflops'] / best[0]['tflops']:8.3f}" if b and best[0] else f"{'-':>8}" for b in best[1:]]
        print(f"{d:>4} {s:>6} {str(c):>6} | " + " | ".join(cells) + " | " + " ".join(ratios))
    print()
    print("every variant of", runs[0][0])
    for d, c, s in shapes:
        rows = [r for r in runs[0][1] if (r["d"], r["causal"], r["s"]) == (d, c, s)]
        print(f"{d:>4} {s:>6} {str(c):>6} | " + "  ".join(f"{r['variant']}={r['tflops']:.1f}" for r in rows))


if __name__ == "__main__":
    main()
