#!/usr/bin/env bash
# session 56 call D: evt's max-autotune on ResNet-50's bottleneck step (each region's fused kernel
# timed against its unfused path: which of the four regions pays), beside Inductor's max-autotune;
# the decisions' records come back.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 400 python3 -m evt.cli bench --baselines evt,evt-max-autotune --out /tmp/d/bench \
  --only 'step/resnet_bottleneck' --time-budget 390 --item-timeout 300 --step-item-timeout 300 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|max-autotune [0-9]" /tmp/d/bench.log | cut -c1-300
mkdir -p /tmp/d/decisions; cp -r "$EVT_CACHE_DIR"/autotune/. /tmp/d/decisions/ 2>/dev/null
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz > /dev/null 2>&1
tar -czf $OUT/callD.tar.gz -C /tmp d
