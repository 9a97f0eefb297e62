#!/usr/bin/env bash
# session 55 call C: BatchNorm's column statistics at the shapes whose pick the new reduction-
# over-M cost moves (SimCLR's, BERT's, the projection head's), four configs side by side.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
CF=128x256x64_c1x1_cooperative,256x128x64_c1x1_cooperative,128x128x64_c1x1_cooperative,128x128x64_c1x1_pingpong
timeout 300 python3 benchmarks/config_sweep.py --patterns batchnorm_stats --configs $CF \
  --shapes 4096x2048x2048,8192x4096x1024,4096x4096x2048,8192x3072x768 --json /tmp/d/config_sweep_batchnorm_shapes.json > /tmp/d/sweep_bn.log 2>&1
echo "sweep rc=$? at $SECONDS s"; tail -n 6 /tmp/d/sweep_bn.log
tar -czf $OUT/callC.tar.gz -C /tmp d
