#!/usr/bin/env bash
# Session 27 call 7: scripts/device-check.sh on c1dbc20 (the session's final code: the review's
# hex base in the refused-bias error, the flash template's trailing blank line).
set -u
cd "$(dirname "$0")/../../../.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
OUT=$OUT/c7 bash scripts/device-check.sh > $OUT/device_check.txt 2>&1
grep -E "tests passed|FAILED|Failed|exit:|SUMMARY" $OUT/device_check.txt
grep -c '"check":"pass"' $OUT/device_check.txt
grep -o '"compile_ms":[0-9.]*,[^}]*"key":"[^"]*"' $OUT/device_check.txt | grep -v '"compile_ms":0.0' | sed 's/,"gflops.*"key"/ /' | cut -c1-120
