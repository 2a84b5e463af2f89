#!/bin/bash
# Session 28 call 9: the mask as bit strings (a row's visible columns, built once per row; one
# select per element on its bit, which ptxas may unpack 7 at a time with R2P) instead of a
# compare and a select per element. Builds: d26 = main, mb = branch mask-bits
# (`bash bench/cuda/build_prebuilt.sh .carry/mb`). SASS counts of the default head_dim 64
# causal kernel, the check (mb), then three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c9; mkdir -p $O
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 mb; do
  cuobjdump -sass .carry/$b/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $O/$b.sass
  echo "$b: $(grep -c '^ */\*[0-9a-f]*\*/' $O/$b.sass) insts, R2P $(grep -c R2P $O/$b.sass), FSEL $(grep -c FSEL $O/$b.sass), ISETP $(grep -c ISETP $O/$b.sass), LOP3 $(grep -c LOP3 $O/$b.sass)"
done | tee $O/sass.txt
(time .carry/mb/check_flash check) > $O/check.txt 2>&1; tail -3 $O/check.txt
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash mb=.carry/mb/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c9.tgz c9 && rm -rf c9
