#!/bin/bash
# Session 16 call 3: the softmax's row max, two changes against main (.carry/v58 = main's
# kernels at 9dd4413), every default key of the issue's grid, three passes, the sides' order
# rotated per pass (one process per side, head_dim and length; both masks):
#   v59: the lane's max in four FMNMX chains (was one linear chain of kNTiles, whose latency the
#        exponentials wait for);
#   v60: v59 + the quad reduction of the max (two shuffles + FMNMX per row) only when some lane
#        of the warp would raise the reference max (vote), the lane's top quad-reduced at the
#        finish instead.
# Then the checks of both.
cd "$(dirname "$0")/../../../.."
O=$OUT/c3; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
V='bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,bf16.d128.bq128.bk128.wgmma$,bf16.d128.bq128.bk128.causal.wgmma$,bf16.d128.bq128.bk192.causal.wgmma$,bf16.d256.bq128.bk80.wgmma$,bf16.d256.bq128.bk80.causal.wgmma$'
order=(main v59 v60)
for pass in 1 2 3; do
  for i in 0 1 2; do
    side=${order[$(( (i + pass - 1) % 3 ))]}
    bin=.carry/$([[ $side == main ]] && echo v58 || echo $side)/check_flash
    for d in 64 128 256; do
      for s in 1024 2048 4096 8192 16384; do
        EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_VARIANTS="$V" timeout 60 $bin bench \
          | sed "s/^{/{\"side\": \"$side\", /" >> $O/ab.jsonl
      done
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
        by.setdefault((r["d"], r["causal"], r["s"], r["variant"]), {}).setdefault(r["side"], []).append(r["tflops"])
print("D causal S variant | main | v59 / main (range) | v60 / main (range)")
for (d, c, s, v), sides in sorted(by.items()):
    m = st.median(sides["main"])
    cols = [f"{m:6.1f}"]
    for k in ("v59", "v60"):
        x = sides.get(k, [])
        cols.append(f"{st.median(x) / m - 1:+6.1%} ({min(x) / m - 1:+.1%}..{max(x) / m - 1:+.1%})" if x else "-")
    print(d, int(c), s, v, "|", " | ".join(cols))
PY
for side in v59 v60; do
  B=.carry/$side/check_flash
  { echo "== $side"
    timeout 90 $B check 20261130 | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
    EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=3 timeout 50 $B check $RANDOM 12 12 | tail -1
    EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee -a $O/check.txt
  echo "checks $side: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
done
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
