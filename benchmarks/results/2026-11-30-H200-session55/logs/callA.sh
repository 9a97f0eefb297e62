#!/usr/bin/env bash
# session 55 call A: patchtst under evt's max-autotune with room to finish (session 54's stage ran
# out after 3 of 6 decisions), beside evt's default mode and Inductor's max-autotune, each in its
# own process, one results folder; the decisions' records (phase seconds) come back too.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 575 python3 -m evt.cli bench --baselines evt,evt-max-autotune,max-autotune --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget 565 --item-timeout 420 --step-item-timeout 420 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|max-autotune [0-9]" /tmp/d/bench.log | cut -c1-300
mkdir -p /tmp/d/decisions; cp -r "$EVT_CACHE_DIR"/autotune/. /tmp/d/decisions/ 2>/dev/null
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz > /dev/null 2>&1
tar -czf $OUT/callA.tar.gz -C /tmp d
