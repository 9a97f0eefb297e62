#!/usr/bin/env bash
# session 56 call B: pointwise convolutions as GEMMs. The nn catalog's bottleneck of pointwise
# convolutions (BatchNorm2d) and the modules whose regions the new view folding changed
# (tied_label_smoothing, clip_loss; shared_weight reordered) on real kernels; then ResNet-50's
# bottleneck step against eager and torch.compile, and in turn with torch.compile.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py \
  -k "pointwise_bottleneck or tied_label_smoothing or clip_loss or shared_weight" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
left=$(( 560 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines eager,evt,compile,in-turn --out /tmp/d/bench \
  --only 'step/resnet_bottleneck' --time-budget $(( left - 10 )) --item-timeout 240 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|in.turn" /tmp/d/bench.log | cut -c1-220 | tail -n 12
grep -h "compiled kernel" /tmp/d/bench.log | head -5
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz > /dev/null 2>&1
tar -czf $OUT/callB.tar.gz -C /tmp d
