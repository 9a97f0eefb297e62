#!/usr/bin/env bash
# session 50 call E: the bench's GPT-J down-projection cases (mm and evt, as run and under CUDA
# graphs, one run) with the long-K swizzle rule; session 48's full run had them at 0.95-1.01 of
# the bare GEMM under graphs. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 300 python3 -m evt.cli bench --baselines mm,evt --only '*/gptj-down' --out /tmp/d/bench \
  --time-budget 290 --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"
grep -A12 "under CUDA graphs: TFLOP" /tmp/d/bench/report.md | head -12
tar -czf $OUT/callE.tar.gz -C /tmp d
