#!/usr/bin/env python3
"""Warp-stall summary of one kernel from Nsight Compute's source page (SASS), as written by

  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > KERNEL.sass.csv
  ncu_stalls.py KERNEL.sass.csv [top]

Prints the share of all warp samples per stall reason, the `top` instructions with the most
samples (and their three largest reasons), and the samples of each mbarrier wait (the branch
after a SYNCS.PHASECHK try-wait, where a waiting warp sits) with the barrier's address.
"""
import csv, sys, collections


def num(x):
    try:
        return float(x)
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    samples = lambda r: num(r[ix["Warp Stall Sampling (All Samples)"]])
    src = lambda r: r[ix["Source"]].strip()
    stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(samples(r) for r in data) or 1.0
    print(f"{sys.argv[1]}: {total:.0f} warp samples")
    per_reason = collections.Counter()
    for r in data:
        for c in stall_cols:
            per_reason[c] += num(r[ix[c]])
    for c, v in per_reason.most_common(12):
        print(f"  {c[6:]:20s} {100 * v / total:5.1f}%")
    print(f"top {top_n} instructions:")
    for r in sorted(data, key=lambda r: -samples(r))[:top_n]:
        reasons = sorted(((num(r[ix[c]]), c[6:]) for c in stall_cols), reverse=True)[:3]
        why = " ".join(f"{n}:{v:.0f}" for v, n in reasons if v)
        print(f"  {r[ix['Address']][-5:]} {100 * samples(r) / total:5.2f}% {src(r)[:64]:64s} {why}")
    print("mbarrier waits (samples on the branch after each try-wait; >= 0.05%):")
    for i, r in enumerate(data[:-1]):
        if "SYNCS.PHASECHK" in src(r) and "BRA" in src(data[i + 1]):
            bar = src(r).split("[", 1)[1].split("]", 1)[0]
            if samples(data[i + 1]) / total >= 5e-4:
                print(f"  {r[ix['Address']][-5:]} [{bar:18s}] {100 * samples(data[i + 1]) / total:5.2f}%")


if __name__ == "__main__":
    main()
