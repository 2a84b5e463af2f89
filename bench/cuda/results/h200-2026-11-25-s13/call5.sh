#!/bin/bash
# Session 13 call 5: with drawn items (v48), the head_dim 64 tiles at 1k / 2k again: every d64
# variant of the bench list without extras, both masks, three passes (one bench process per
# shape and pass times them all in turn).
cd "$(dirname "$0")/../../../.."
O=$OUT/c5; mkdir -p $O
B=.carry/v48/check_flash
V='bf16.d64.bq128.bk128.wgmma$,bf16.d64.bq128.bk128.wgmma.qsmem$,bf16.d64.bq128.bk192.wgmma$,bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq192.bk112.wgmma$'
VC='bf16.d64.bq128.bk128.causal.wgmma$,bf16.d64.bq128.bk128.causal.wgmma.qsmem$,bf16.d64.bq128.bk192.causal.wgmma$,bf16.d64.bq192.bk128.causal.wgmma$,bf16.d64.bq192.bk112.causal.wgmma$,bf16.d64.bq192.bk96.causal.wgmma$,bf16.d64.bq192.bk80.causal.wgmma$'
for pass in 1 2 3; do
  for s in 1024 2048; do
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=0 EJK_BENCH_VARIANTS=$V timeout 60 $B bench >> $O/tiles.jsonl
    EJK_BENCH_D=64 EJK_BENCH_S=$s EJK_BENCH_CAUSAL=1 EJK_BENCH_VARIANTS=$VC timeout 60 $B bench >> $O/tiles.jsonl
  done
done
python3 - $O/tiles.jsonl <<'PY' | tee $O/tiles.txt
import json, statistics as st, sys
rows = {}
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l); rows.setdefault((r['causal'], r['s'], r['variant']), []).append(r['tflops'])
for k, v in sorted(rows.items()):
    print(f"{str(k[0]):5} {k[1]:5} {k[2]:45} {st.median(v):6.1f}  ({min(v):.1f}-{max(v):.1f})")
PY
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
