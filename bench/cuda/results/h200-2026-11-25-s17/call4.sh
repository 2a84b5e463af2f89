#!/bin/bash
# Session 17 call 4: v62b (wt-v62 at its second commit): call 3's v62 lost 12-19% at every
# length, so the chunked softmax now runs only in a copy of its own, for tiles with dead
# chunks; every other tile runs main's softmax. Three passes against main (.carry/s16), the
# default causal keys; a short check of v62b.
cd "$(dirname "$0")/../../../.."
O=$OUT/c4; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
t0=$(date +%s)
L=1024,2048,4096,16384
bash bench/cuda/ab_builds.sh $O/ab 3 main=.carry/s16/check_flash v62b=.carry/v62b/check_flash \
  "64:$L:bf16.d64.bq128.bk128.causal.wgmma\$,bf16.d64.bq192.bk128.causal.wgmma\$" \
  "128:$L:bf16.d128.bq128.bk128.causal.wgmma\$,bf16.d128.bq128.bk192.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab.log 2>&1
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
B=.carry/v62b/check_flash
{ timeout 100 $B check 20261201 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 100 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
sed -n '/every variant/,$p' $O/ab/ab.txt | cut -c1-150
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
