#!/bin/bash
# Session 21 call 1: v75 (head_dim 16-48 on the wgmma family: 64-column tiles, TMA boxes wider
# than the tensor, P V at N = head_dim). Full check (new variants 43-49 of check_variants),
# memcheck / racecheck on them, then d32 / d48: every bench variant (wgmma 128 x 128 and 192 x 128
# against the sm80 family these keys ran before), and d32's default paired with PyTorch SDPA.
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $O/gpu.txt
t0=$(date +%s)
EJK_PREBUILT=.carry/v75 OUT=$O/check timeout 300 bash bench/cuda/build_and_check.sh check > $O/check.txt 2>&1
echo "check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -v "^PASS\|regs" $O/check.txt | tail -25
B=.carry/v75/check_flash
EJK_PERSISTENT_GRID=5 timeout 90 compute-sanitizer --tool memcheck --print-limit 5 $B check 8 7 43 2>&1 | tail -2 > $O/sanitizers.txt
for v in "4 43" "3 47"; do
  EJK_PERSISTENT_GRID=5 timeout 60 compute-sanitizer --tool racecheck --print-limit 5 $B check 9 $v 2>&1 | tail -2
done >> $O/sanitizers.txt
cat $O/sanitizers.txt; echo "sanitizers done ($(( $(date +%s) - t0 )) s)"
for d in 32 48; do
  EJK_BENCH_D=$d timeout 90 $B bench > $O/bench_d$d.jsonl 2>&1
done
python3 - $O <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/bench_d*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); print(f"d{r['d']} S={r['s']:>5} causal={int(r['causal'])} {r['variant']:<40} {r['tflops']:6.1f}")
PY
echo "bench done ($(( $(date +%s) - t0 )) s)"
left=$(( 570 - ($(date +%s) - t0) ))
[[ $left -gt 60 ]] && timeout $left python3 bench/cuda/paired.py $B $O/paired32 --passes 1 --d 32 > $O/paired32.txt 2>&1; tail -14 $O/paired32.txt
echo "paired d32 done ($(( $(date +%s) - t0 )) s)"
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
