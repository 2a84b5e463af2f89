#!/usr/bin/env python3
"""Counts wgmma-related SASS per kernel: `cuobjdump -sass BIN | sass_counts.py PATTERN`.
PATTERN: a substring of the mangled kernel name. Prints, per matching function, the count of
HGMMA (and of the 64x8x16 dummies ptxas closes groups with), WARPGROUP.ARRIVE,
WARPGROUP.DEPBAR and the instruction total."""
import re, sys
pat = sys.argv[1]
fun, counts = None, {}
def flush():
    if fun and pat in fun:
        print(fun[-90:], counts)
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        flush(); fun, counts = m.group(1), {"insts": 0, "HGMMA": 0, "HGMMA.64x8x16": 0, "ARRIVE": 0, "DEPBAR": 0}
        continue
    if fun is None or not re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
        continue
    counts["insts"] += 1
    if "HGMMA" in line: counts["HGMMA"] += 1
    if "HGMMA.64x8x16" in line: counts["HGMMA.64x8x16"] += 1
    if "WARPGROUP.ARRIVE" in line: counts["ARRIVE"] += 1
    if "WARPGROUP.DEPBAR" in line: counts["DEPBAR"] += 1
flush()
