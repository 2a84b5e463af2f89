#!/bin/bash
# Session 28 call 10: the bit-string mask with each row's visible interval computed once per
# item in 32 bits (mb2, branch mask-bits 2nd commit; `bash bench/cuda/build_prebuilt.sh
# .carry/mb2`) against main (d26) and the per-tile 64-bit setup (mb, call 9). SASS counts of the
# default head_dim 64 causal kernel, the check (mb2), then three passes, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c10; mkdir -p $O
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 mb mb2; do
  cuobjdump -sass .carry/$b/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $O/$b.sass
  echo "$b: $(grep -c '^ */\*[0-9a-f]*\*/' $O/$b.sass) insts, R2P $(grep -c R2P $O/$b.sass), FSEL $(grep -c FSEL $O/$b.sass), ISETP $(grep -c ISETP $O/$b.sass), LOP3 $(grep -c LOP3 $O/$b.sass)"
done | tee $O/sass.txt
(time .carry/mb2/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt
bash bench/cuda/ab_builds.sh $O 3 d26=.carry/d26/check_flash mb=.carry/mb/check_flash mb2=.carry/mb2/check_flash \
  "64:1024,2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run.txt 2>&1
cat $O/ab.txt
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
