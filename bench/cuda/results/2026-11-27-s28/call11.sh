#!/bin/bash
# Session 28 call 11: mb3 = mb2 with the column count without branches and the bits by one
# clamped funnel shift (branch mask-bits, 3rd commit; `bash bench/cuda/build_prebuilt.sh
# .carry/mb3`). SASS counts, the check (mb3), then d26 / mb2 / mb3 rotated: five passes of
# head_dim 64 causal 1k, three of the other causal rows.
cd "$(dirname "$0")/../../../.."
O=$OUT/c11; mkdir -p $O
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 mb2 mb3; do
  cuobjdump -sass .carry/$b/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $O/$b.sass
  echo "$b: $(grep -c '^ */\*[0-9a-f]*\*/' $O/$b.sass) insts, R2P $(grep -c R2P $O/$b.sass), FSEL $(grep -c FSEL $O/$b.sass), ISETP $(grep -c ISETP $O/$b.sass), SHF $(grep -c SHF $O/$b.sass)"
done | tee $O/sass.txt
(time .carry/mb3/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt
B="d26=.carry/d26/check_flash mb2=.carry/mb2/check_flash mb3=.carry/mb3/check_flash"
bash bench/cuda/ab_builds.sh $O/a 5 $B "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" > $O/ab_run_a.txt 2>&1
bash bench/cuda/ab_builds.sh $O/b 3 $B \
  "64:2048,4096,16384:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:1024,4096:bf16.d256.bq128.bk80.causal.wgmma\$" > $O/ab_run_b.txt 2>&1
cat $O/a/ab.txt $O/b/ab.txt
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
