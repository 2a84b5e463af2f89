#!/bin/bash
# Session 28 call 7: main's SASS of the default head_dim 64 causal kernel (the mask's code).
cd "$(dirname "$0")/../../../.."
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
cuobjdump -sass .carry/d26/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' > $OUT/d26_d64c.sass
wc -l $OUT/d26_d64c.sass
