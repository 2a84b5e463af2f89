#!/bin/bash
# Session 10 call 5: the issue's borderline rows, five alternating passes of ours (main's
# default key for each row, .carry/v37 = build_prebuilt.sh on 8d388c6) and PyTorch SDPA's
# cuDNN and FlashAttention-2 backends (bench_vs_peers.time_peers: do_bench median, one process
# per pass), so each ratio is a median over passes taken in one call.
cd "$(dirname "$0")/../../../.."
# C=c6: the same on another machine (call6.sh).
C=${C:-c5}; B=.carry/v37/check_flash; O=$OUT/$C; mkdir -p $O
# D S causal default-key
ROWS="128 4096 0 bf16.d128.bq128.bk128.wgmma$
128 8192 0 bf16.d128.bq128.bk128.wgmma$
128 16384 0 bf16.d128.bq128.bk128.wgmma$
64 1024 0 bf16.d64.bq128.bk128.wgmma$
64 1024 1 bf16.d64.bq128.bk128.causal.wgmma$
64 2048 1 bf16.d64.bq128.bk128.causal.wgmma$
256 1024 0 bf16.d256.bq128.bk80.wgmma$
256 1024 1 bf16.d256.bq128.bk80.causal.wgmma$"
for pass in 1 2 3 4 5; do
  echo "$ROWS" | while read d s c v; do
    EJK_BENCH_D=$d EJK_BENCH_S=$s EJK_BENCH_CAUSAL=$c EJK_BENCH_VARIANTS=$v timeout 60 $B bench >> $O/ours.p$pass.jsonl
  done
  echo "$ROWS" | python3 -c "
import json, sys
sys.path.insert(0, 'bench/cuda')
import bench_vs_peers as b
for line in sys.stdin:
    d, s, c, _ = line.split()
    r = b.time_peers(int(s), int(d), c == '1')
    print(json.dumps({'d': int(d), 's': int(s), 'causal': c == '1', **{k: v.get('tflops') for k, v in r.items()}}))
" >> $O/peers.p$pass.jsonl
done
python3 - $O <<'PY' | tee $O/ratios.txt
import json, glob, statistics, sys
o = sys.argv[1]
ours, peer = {}, {}
for f in sorted(glob.glob(o + '/ours.p*.jsonl')):
    for l in open(f):
        if l.startswith('{'):
            r = json.loads(l); ours.setdefault((r['d'], r['s'], bool(r['causal'])), []).append(r['tflops'])
for f in sorted(glob.glob(o + '/peers.p*.jsonl')):
    for l in open(f):
        r = json.loads(l); k = (r['d'], r['s'], r['causal'])
        for p in ('cudnn', 'flash2'): peer.setdefault((k, p), []).append(r[p])
print('   D      S causal | ours TFLOP/s (range) | cuDNN (range) | FA2 | ours/cuDNN median, per pass | ours/FA2')
for k in sorted(ours):
    a, c, f = ours[k], peer[(k, 'cudnn')], peer[(k, 'flash2')]
    per = [x / y for x, y in zip(a, c)]
    print(f'{k[0]:4d} {k[1]:6d} {str(k[2]):>6} | {statistics.median(a):6.1f} ({min(a):.0f}-{max(a):.0f}) | '
          f'{statistics.median(c):6.1f} ({min(c):.0f}-{max(c):.0f}) | {statistics.median(f):6.1f} | '
          f'{statistics.median(a) / statistics.median(c):.3f}, {min(per):.3f}-{max(per):.3f} | '
          f'{statistics.median(a) / statistics.median(f):.2f}')
PY
cd $OUT && tar czf $C.tgz $C && rm -rf $C
