#!/bin/bash
# Session 24 call 6: call 5's four launches again with raw ncu metrics: instructions executed,
# the stall reasons per issued instruction, and each pipe's active cycles.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
B=.carry/m24/check_flash
t0=$(date +%s)
M="smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active"
prof() {  # name d variant bias
  local grid=1
  [[ $4 == 1 ]] && grid=0
  EJK_BENCH_GRID=$grid EJK_BENCH_BIAS=$4 EJK_BENCH_D=$2 EJK_BENCH_S=16384 EJK_BENCH_CAUSAL=0 \
    EJK_BENCH_VARIANTS="$3\$" timeout 150 ncu --metrics "$M" -k regex:flash --launch-skip 2 --launch-count 1 \
    $B bench > $O/ncu_$1.txt 2>&1
  echo "$1 rc=$? ($(( $(date +%s) - t0 )) s)"
}
prof d128_plain 128 bf16.d128.bq128.bk128.wgmma 0
prof d128_bias 128 bf16.d128.bq128.bk128.bias.wgmma 1
prof d64_plain 64 bf16.d64.bq192.bk128.wgmma 0
prof d64_bias 64 bf16.d64.bq192.bk128.bias.wgmma 1
python3 - $O <<'PY'
import re, sys, glob
vals = {}
for f in sorted(glob.glob(sys.argv[1] + "/ncu_*.txt")):
    name = f.split("ncu_")[1][:-4]
    for l in open(f):
        m = re.match(r"\s+(\S+)\s+(\S+)?\s+([-\d.,]+)\s*$", l)
        if m and ("__" in m.group(1)):
            vals.setdefault(m.group(1), {})[name] = float(m.group(3).replace(",", ""))
names = ["d128_plain", "d128_bias", "d64_plain", "d64_bias"]
print(f"{'metric':<90}" + "".join(f"{n:>12}" for n in names))
for k, v in sorted(vals.items()):
    if max(v.values()) < 0.05: continue
    print(f"{k:<90}" + "".join(f"{v.get(n, float('nan')):12.2f}" for n in names))
PY
echo "all done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
