R=bench/cuda/results/2026-11-27-s28
K=ELi64ELi128ELi128EXtlNS2_10FlashFlagsELb1ELb0ELb0ELb0ELb0ELb0ELb0EEELb1ELi0ELNS2_12Sm90ScheduleE0ELNS2_12Sm90QOperandE0E
for b in d26 hl h27; do echo "== $b"; cuobjdump -sass .carry/$b/check_flash | python3 $R/sass_counts.py "$K"; done
cuobjdump -sass .carry/hl/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' | grep -n "HGMMA\|WARPGROUP\|BAR\|BRA\|SYNCS" > $OUT/hl_gmma.txt
cuobjdump -sass .carry/d26/check_flash | awk -v k="$K" '/Function :/{p=index($0,k)>0} p' | grep -n "HGMMA\|WARPGROUP\|BAR\|BRA\|SYNCS" > $OUT/d26_gmma.txt
