#!/bin/bash
# Session 8 call 5: sustained (6 s back to back, at the power cap) D=128 rows against cuDNN,
# Q in registers (default) beside its .qsmem and .per_item twins; then NVRTC cold compiles on
# this host, session 7's headers (.carry/wt-base, d007e62) alternating with v25's, 3 rounds.
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
EJK_PREBUILT=.carry/v26 OUT=$O EJK_SUSTAIN_ROWS="128,4096,0,d128.bq128.bk128.wgmma 128,8192,0,d128.bq128.bk128.wgmma 128,16384,0,d128.bq128.bk128.wgmma 128,16384,1,d128.bq128.bk192.causal.wgmma" \
  timeout 300 bash bench/cuda/sustained.sh 2>&1 | grep -v Warning | cut -c1-220
python3 - $O/smi.csv <<'PY'
import sys, statistics
rows = [l.split(",") for l in open(sys.argv[1]) if l[0].isdigit()]
busy = [(float(c), float(p)) for c, p in rows if float(p) > 300]
if busy: print("busy samples", len(busy), "SM clock median", statistics.median(c for c, _ in busy), "MHz, power median", statistics.median(p for _, p in busy), "W")
PY
R=$PWD/.carry/v26/runtime_smoke
for round in 1 2 3; do
  for k in flash_fwd.cuda.sm90a.bf16.d128.bq128.bk128.causal flash_fwd.cuda.sm90a.f16.d64.bq128.bk64 flash_fwd.cuda.sm90a.bf16.d256.bq128.bk64.causal.win.cap.sink.bias; do
    for tree in .carry/wt-base .; do
      (cd $tree && CUDA_CACHE_DISABLE=1 $R compile $k 2>&1 | grep "^flash" | awk -v t=$tree '{print t, $1, $2}')
    done
  done
done | tee $O/nvrtc.txt | sort | awk '{k=$1" "$2; a[k]=a[k]" "$3} END{for (k in a) print k, a[k]}' | sort -k2
