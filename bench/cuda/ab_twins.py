#!/usr/bin/env python3
"""A/B of twin variants timed in the same check_flash bench passes.

  ab_twins.py SUFFIX pass1.jsonl [pass2.jsonl ...]

A twin is a variant whose name is another's plus SUFFIX (e.g. `.qsmem`, `.nopp`,
`.per_item`): the same kernel but for one tuning argument, in the same binary and run, so the
comparison is free of build-to-build and call-to-call drift. One row per (shape, variant):
the median TFLOP/s over the passes of each, every pass's ratio, and the ratio of the medians
(> 1: the variant without the suffix is faster).
"""
import collections, json, statistics, sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    suffix, paths = sys.argv[1], sys.argv[2:]
    # (d, causal, s, variant) -> TFLOP/s of each pass, in pass order
    t = collections.defaultdict(list)
    for path in paths:
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                t[(r["d"], r["causal"], r["s"], r["variant"])].append(r["tflops"])
    print(f"{'D':>4} {'S':>6} {'causal':>6}  {'variant':40} {'median':>8} {'twin':>8} {'ratio':>7}  per pass")
    ratios = []
    for (d, c, s, v), base in sorted(t.items()):
        twin = t.get((d, c, s, v + suffix))
        if v.endswith(suffix) or not twin:
            continue
        per_pass = [a / b for a, b in zip(base, twin)]
        ratio = statistics.median(base) / statistics.median(twin)
        ratios.append(ratio)
        print(f"{d:>4} {s:>6} {str(c):>6}  {v:40} {statistics.median(base):8.1f} "
              f"{statistics.median(twin):8.1f} {ratio:7.3f}  " + " ".join(f"{x:.3f}" for x in per_pass))
    if ratios:
        print(f"rows {len(ratios)}, ratio of medians: min {min(ratios):.3f} median "
              f"{statistics.median(ratios):.3f} max {max(ratios):.3f}")


if __name__ == "__main__":
    main()
