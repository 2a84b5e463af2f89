#!/usr/bin/env bash
# On a GPU machine: ejk tune on rows of the flash forward grid (bf16, B*S = 16k, H*D = 2048), then the
# tuned and the heuristic key through ejk run, back to back.
# E: the ejk CLI; OUT: where the JSON of each tune goes (default out/bench/tune).
set -uo pipefail
E=${E:-build/cli/ejk}
OUT=${OUT:-out/bench/tune}
mkdir -p "$OUT"
for d in 128 64; do
  h=$((2048 / d))
  for s in 2048 8192; do
    b=$((16384 / s))
    for c in "" "--causal"; do
      row="--b $b --sq $s --sk $s --hq $h --hkv $h --d $d $c"
      t0=$SECONDS
      $E tune flash_attention $row --dtype bf16 --backend cuda --iters 30 --json > $OUT/tune_${d}_${s}${c:+_c}.json 2>$OUT/tune_${d}_${s}${c:+_c}.err
      took=$((SECONDS - t0))
      tuned=$($E run flash_attention $row --dtype bf16 --backend cuda --iters 50 --json | tail -1)
      heur=$(EJK_TUNING=0 $E run flash_attention $row --dtype bf16 --backend cuda --iters 50 --json | tail -1)
      python3 - "$row" "$took" "$tuned" "$heur" <<'PY'
import json, sys
row, took, t, h = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(f"{row:55s} tune {took:>3s} s | tuned {t['key'][21:]:28s} {t['ms']:.3f} ms {t['gflops']/1e3:6.1f} TF | heuristic {h['key'][21:]:28s} {h['ms']:.3f} ms {h['gflops']/1e3:6.1f} TF | {h['ms']/t['ms']:.3f}x")
PY
    done
  done
done
$E tune ls | head -5
