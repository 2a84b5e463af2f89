#!/bin/bash
# Session 29 call 6: two repairs of w29's head_dim 128 non-causal loss (-1..-2%, calls 1-5):
# w29b adds a group's step offsets to the descriptors' low word (32-bit) inside the statement,
# w29o passes every step's descriptor as an operand (no addition inside). SASS counts of the
# head_dim 128 non-causal kernel, d26 / w29 / w29b / w29o rotated over seven passes, check of w29b.
cd "$(dirname "$0")/../../../.."
O=$OUT/c6; mkdir -p $O
K=ILNS2_4ElemE1ELi128ELi128ELi128EXtlNS2_10FlashFlagsELb0ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 w29 w29b w29o; do
  cuobjdump -sass .carry/$b/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $O/$b.d128.sass
  echo "$b: $(grep -c '^ */\*[0-9a-f]*\*/' $O/$b.d128.sass) insts, UIADD3.64 $(grep -c 'UIADD3.64' $O/$b.d128.sass), ULOP3 $(grep -c 'ULOP3' $O/$b.d128.sass), NOP $(grep -c ' NOP' $O/$b.d128.sass)"
done | tee $O/sass.txt
timeout 330 bash bench/cuda/ab_builds.sh $O/ab 7 d26=.carry/d26/check_flash w29=.carry/w29/check_flash \
  w29b=.carry/w29b/check_flash w29o=.carry/w29o/check_flash \
  "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:4096,16384:bf16.d128.bq128.bk128.wgmma\$" \
  "128:4096:bf16.d128.bq128.bk128.causal.wgmma\$" \
  "256:4096:bf16.d256.bq128.bk80.wgmma\$" > $O/ab_run.txt 2>&1
echo "ab rc=$?"; sed -n '/every variant/,$p' $O/ab/ab.txt
(time timeout 150 .carry/w29b/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
