#!/bin/bash
# Session 23 call 4: the product path on branch bias-prefetch (70dcb76): scripts/device-check.sh
# (CMake build, CUDA ctests incl. the random feature matrix, `ejk run --check` incl. bias keys
# through NVRTC with the staged bias, sanitizers), then `ejk run` with a bias whose rows the
# kernel reads in place (Sk 4096) and ones the runtime first copies (Sk 4095, 4092).
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
t0=$(date +%s)
OUT=$O/dc timeout 480 bash scripts/device-check.sh > $O/device_check.txt 2>&1
echo "device-check rc=$? ($(( $(date +%s) - t0 )) s)"; grep -c '"check":"pass"' $O/device_check.txt
grep -E "tests passed|Failed|FAIL|exit:|ERROR SUMMARY|RACECHECK|bias" $O/device_check.txt | cut -c1-300
export EJK_CACHE_DIR=/tmp/ejk-cache
for sk in 4096 4095 4092; do
  for d in 64 128; do
    /tmp/ejk-build/cli/ejk run flash_attention --backend cuda --dtype bf16 --b 1 --sq 4096 --sk $sk --hq 16 --hkv 16 \
      --d $d --bias --iters 20 --json 2>&1 | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('sk', $sk, j['key'], 'ms', j['ms'], 'TF', round(j['gflops']/1e3,1))"
  done
done
rm -rf $O/dc/build.log
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
