#!/usr/bin/env python3
"""Per-kernel SASS counts of two builds: `sass_diff.py A.sass B.sass` (cuobjdump -sass output).
Prints the kernels whose instruction, HGMMA or WARPGROUP.ARRIVE counts differ, then totals
over the kernels both hold."""
import re, sys


def counts(path):
    out, fun = {}, None
    for line in open(path, errors="replace"):
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            fun = m.group(1)
            out[fun] = {"insts": 0, "HGMMA": 0, "ARRIVE": 0}
            continue
        if fun is None or not re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            continue
        c = out[fun]
        c["insts"] += 1
        c["HGMMA"] += "HGMMA" in line
        c["ARRIVE"] += "WARPGROUP.ARRIVE" in line
    return out


a, b = counts(sys.argv[1]), counts(sys.argv[2])
common = sorted(set(a) & set(b))
diff = [f for f in common if a[f] != b[f]]
for f in diff:
    print(f[-100:], a[f], "->", b[f])
tot = lambda c, k: sum(c[f][k] for f in common)
print(f"{len(common)} kernels in both, {len(diff)} differ; totals:",
      {k: (tot(a, k), tot(b, k)) for k in ("insts", "HGMMA", "ARRIVE")})
