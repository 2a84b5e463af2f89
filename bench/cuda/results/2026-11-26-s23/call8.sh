#!/bin/bash
# Session 23 call 8: the final tree of branch bias-prefetch (9fe1069): scripts/device-check.sh
# (now with a d64 causal GQA bias at odd Sk: 192x128, the bias copied first), then `ejk run`
# of the d64 / d128 bias keys at 4k as in call 6 (d64 now 192x128 by the heuristic).
cd "$(dirname "$0")/../../../.."
O=$OUT/c8; mkdir -p $O
t0=$(date +%s)
OUT=$O/dc timeout 480 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -c '"check":"pass"' $O/device_check.txt
grep -E "tests passed|Failed|FAIL|fail|exit:|ERROR SUMMARY|RACECHECK|d64.bq192.bk128.causal.bias" $O/device_check.txt | cut -c1-300
export EJK_CACHE_DIR=/tmp/ejk-cache
for sk in 4096 4095; do
  for d in 64 128; do
    /tmp/ejk-build/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq 4096 --sk $sk --hq 16 --hkv 16 \
      --d $d --bias --iters 20 --json 2>&1 | tail -1 | tee -a $O/runs.jsonl | python3 -c "import json,sys; j=json.load(sys.stdin); print('sk', $sk, j['key'], 'ms', j['ms'], 'TF', round(j['gflops']/1e3,1))"
  done
done
rm -f $O/dc/build.log
cd $OUT && tar czf c8.tgz c8 && rm -rf c8
