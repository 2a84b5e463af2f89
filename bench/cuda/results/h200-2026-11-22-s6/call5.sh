#!/bin/bash
# Session 6 call 5: HEAD (0864e51) checks: build_and_check's check section on prebuilt binaries
# (check, random persistent grids, L2 groups, memcheck, racecheck, runtime_smoke run + run-large),
# then device-check (project build with CUDA on the device, ctest, ejk run --check, sanitizers).
cd "$(dirname "$0")/../.."
export EJK_PREBUILT=.carry/v28
OUT=$OUT/bc timeout 330 bash bench/cuda/build_and_check.sh check 2>&1 | grep -v '^PASS' | tail -30
OUT=$OUT/dc timeout 400 bash scripts/device-check.sh 2>&1 | tail -45
