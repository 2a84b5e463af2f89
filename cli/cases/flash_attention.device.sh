# flash_attention's own GPU checks beyond its problems (run by scripts/device-check.sh with E,
# the ejk binary): an NVRTC cold compile of keys not built in, then a cache hit; and
# compute-sanitizer over one call with every feature on.
echo "== NVRTC cold compile, then cache hit"
rm -rf /tmp/ejk-cache2
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 112 --causal --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E compile flash_attention --backend cuda --arch sm_90a --d 128 --causal --segments --json
EJK_CACHE_DIR=/tmp/ejk-cache2 $E run flash_attention --backend cuda --dtype bf16 --d 112 --causal --sq 256 --sk 256 --iters 1 --json | tail -1
echo "== compute-sanitizer"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 $E run flash_attention --backend cuda --dtype bf16 --b 1 \
    --sq 200 --sk 333 --hq 4 --hkv 2 --d 128 --causal --window 64,8 --softcap 20 --sinks --segments --bias --iters 1 --check \
    2>&1 | tail -3
  echo "$tool exit: $?"
done
