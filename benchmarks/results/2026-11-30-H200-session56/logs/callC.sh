#!/usr/bin/env bash
# session 56 call C: ResNet-50's bottleneck step at 256 images (50176 pixels a map), its pointwise
# convolutions run as GEMMs, against eager, torch.compile and Inductor's max-autotune, and in
# turn with torch.compile.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 560 python3 -m evt.cli bench --baselines eager,evt,compile,in-turn,max-autotune --out /tmp/d/bench \
  --only 'step/resnet_bottleneck' --time-budget 550 --item-timeout 300 --step-item-timeout 300 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|in.turn" /tmp/d/bench.log | cut -c1-230 | tail -n 12
grep -h "compiled kernel" /tmp/d/bench.log | head -5
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-C.tar.xz > /dev/null 2>&1
tar -czf $OUT/callC.tar.gz -C /tmp d
