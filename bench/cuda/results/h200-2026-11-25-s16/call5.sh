#!/bin/bash
# Session 16 call 5 (prepared, NOT RUN: the session's device time was spent): v61, the two
# consumer warpgroups of a block started a few tiles apart (v61_lag.patch on main). Without
# the turn ring (`.nopp`) each crosses its item boundaries on its own, but from a common start
# they stay in step (session 10: .nopp within -2.6..+1.8% of the ring at head_dim 64); with a
# lag of L tiles one runs its tile loop while the other is between items.
# Build on main + the patch (bench/cuda/build_prebuilt.sh): .carry/v61n (no lag: the .nopp
# baseline), .carry/v61l1 (-DEJK_SM90_LAG=1), .carry/v61l2 (-DEJK_SM90_LAG=2). The lag applies
# only to persistent two-consumer kernels without the ring (the new d64 128 x 128 .nopp
# variants; kLag + 2 <= stages); every other kernel is main's, the ring default the control.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
V='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma.nopp$,bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.wgmma.nopp$,bf16.d64.bq192.bk128.wgmma$'
order=(v61n v61l1 v61l2)
for pass in 1 2 3; do
  for i in 0 1 2; do
    side=${order[$(( (i + pass - 1) % 3 ))]}
    for s in 1024 2048 4096 16384; do
      EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_VARIANTS="$V" timeout 60 .carry/$side/check_flash bench \
        | sed "s/^{/{\"side\": \"$side\", /" >> $O/ab.jsonl
    done
  done
done
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
python3 - $O/ab.jsonl <<'PY' | tee $O/ab.txt
import json, sys, statistics as st
by = {}
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        by.setdefault((r["causal"], r["s"], r["variant"]), {}).setdefault(r["side"], []).append(r["tflops"])
print("causal S variant | v61n | v61l1 / v61n | v61l2 / v61n")
for (c, s, v), sides in sorted(by.items()):
    m = st.median(sides["v61n"])
    cols = [f"{m:6.1f}"] + [f"{st.median(sides[k]) / m - 1:+6.1%} ({min(sides[k]) / m - 1:+.1%}..{max(sides[k]) / m - 1:+.1%})"
                            for k in ("v61l1", "v61l2") if k in sides]
    print(int(c), s, v, "|", " | ".join(cols))
PY
for side in v61l1 v61l2; do
  B=.carry/$side/check_flash
  { echo "== $side"
    timeout 90 $B check 20261201 | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1
    # the two lag variants (check list 35, 36) under racecheck, grids of three
    EJK_PERSISTENT_GRID=3 timeout 120 compute-sanitizer --tool racecheck $B check 7 2 35 | tail -2; } 2>&1 | tee -a $O/check.txt
done
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
