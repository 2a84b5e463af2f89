#!/bin/bash
# Session 15 call 1: v55 (three-consumer blocks pass items whose 64 rows all lie past the block's
# valid rows (v49b), and non-causal persistent blocks rotate one slot per round) against main
# (base), three alternating passes: the target d64 192 x 128 non-causal 1k / 2k (and 128 x 128
# there, the 1k default), the d64 192 x 128 causal 8k default (its last q block has 128 rows),
# d128 non-causal 128 x 128 1k / 4k (rotation only) as controls. Checks on v55 (full, grids of
# three, L2 head groups, check-bench on grids of three). Then d64 non-causal 1k / 2k paired with
# the SDPA peers on v55 with the heuristic taking 192 x 128 from 1k (spec edited on the device's
# copy only). NVRTC phases of the d128 causal seg key on this host (5 cold compiles).
cd "$(dirname "$0")/../../../.."
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gpu.txt
A=.carry/base/check_flash; B=.carry/v55/check_flash
t0=$(date +%s)
INC=kernels CUDA_INC=/usr/local/cuda/include LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
  bash .carry/nv/med.sh .carry/nv/d128cs.cu | tee $O/nvrtc.txt
bash bench/cuda/ab_builds.sh $O/ab 3 base=$A v55=$B \
  '64:1024,2048:bf16.d64.bq192.bk128.wgmma$,bf16.d64.bq128.bk128.wgmma$' \
  '64:8192:bf16.d64.bq192.bk128.causal.wgmma$' \
  '128:1024,4096:bf16.d128.bq128.bk128.wgmma$' > /dev/null
echo "ab: $(( $(date +%s) - t0 )) s" | tee $O/times.txt
{ timeout 90 $B check 20261125 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check $RANDOM | tail -1
  EJK_PERSISTENT_GRID=3 EJK_CHECK_L2_KV_HEADS=1 timeout 50 $B check $RANDOM 12 12 | tail -1
  EJK_PERSISTENT_GRID=3 timeout 90 $B check-bench $RANDOM | tail -1; } 2>&1 | tee $O/check.txt
echo "checks: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
sed -i 's/seqlen_q >= 2048 \* (1 + 3 \* causal)/seqlen_q >= 1024 * (1 + 7 * causal)/' specs/flash_attention.yaml
grep -n "1024 \* (1 + 7" specs/flash_attention.yaml
PYTHONUNBUFFERED=1 timeout $(( 570 - ($(date +%s) - t0) )) python3 bench/cuda/paired.py $B $O/paired --passes 3 \
  --d 64 --s 1024,2048 --causal 0 > $O/paired.txt 2>&1
grep -v "^every\|^$" $O/ab/ab.txt | head -14 | cut -c1-130
cut -c1-130 $O/paired.txt
echo "total: $(( $(date +%s) - t0 )) s" | tee -a $O/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
