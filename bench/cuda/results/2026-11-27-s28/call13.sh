#!/bin/bash
# Session 28 call 13: the item's last P V over the first half of its keys for a warpgroup whose
# rows see none of the second half (the diagonal's masked half for the first warpgroup, whose
# P is 0 there): that P V ends the item, before the epilogue waits for it. Builds: d26 = main,
# hp = branch half-pv (`bash bench/cuda/build_prebuilt.sh .carry/hp`). SASS counts, the
# check (hp), then d64 causal 1k five passes and the other causal rows three, rotated.
cd "$(dirname "$0")/../../../.."
O=$OUT/c13; mkdir -p $O
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 hp; do
  cuobjdump -sass .carry/$b/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $O/$b.sass
  echo "$b: $(grep -c '^ */\*[0-9a-f]*\*/' $O/$b.sass) insts, HGMMA $(grep -c HGMMA $O/$b.sass), ARRIVE $(grep -c WARPGROUP.ARRIVE $O/$b.sass), DEPBAR $(grep -c WARPGROUP.DEPBAR $O/$b.sass)"
done | tee $O/sass.txt
(time .carry/hp/check_flash check) > $O/check.txt 2>&1; grep "^check:" $O/check.txt
B="d26=.carry/d26/check_flash hp=.carry/hp/check_flash"
bash bench/cuda/ab_builds.sh $O/a 5 $B "64:1024:bf16.d64.bq128.bk128.causal.wgmma\$" > $O/ab_run_a.txt 2>&1
bash bench/cuda/ab_builds.sh $O/b 3 $B \
  "64:2048,4096:bf16.d64.bq128.bk128.causal.wgmma\$" \
  "128:1024,4096:bf16.d128.bq128.bk128.causal.wgmma\$" > $O/ab_run_b.txt 2>&1
cat $O/a/ab.txt $O/b/ab.txt
cd $OUT && tar czf c13.tgz c13 && rm -rf c13
