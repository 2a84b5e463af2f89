#!/bin/bash
# Session 8 call 6: after the review (peers.flex_fn shared by peers.py and bench_vs_peers.py;
# env_flag in bench_flash.cu): both Flex paths and the window rows run, with the same numbers.
cd "$(dirname "$0")/../../../.."
R=bench/cuda/results/h200-2026-11-24-s8
timeout 90 python3 bench/cuda/peers.py flash --b 4 --hq 32 --hkv 8 --s 4096 --d 64 --causal --window 1024,0 --softcap 30 --peer torch_flex 2>/dev/null
EJK_BENCH_GRID=0 EJK_BENCH_WINDOW=1 EJK_BENCH_VARIANTS=causal.win.cap timeout 60 .carry/v27/check_flash bench > /tmp/w.jsonl
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/bench_vs_peers.py /tmp/w.jsonl /tmp/flex.jsonl 2>&1 | grep -v Warning
