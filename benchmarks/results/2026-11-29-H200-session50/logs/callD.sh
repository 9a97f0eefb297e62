#!/usr/bin/env bash
# session 50 call D: the long-K swizzle rule as launched: evt's own order (0:0, now swizzle 4 at
# these down projections) beside the compiled order (0:1, what 0:0 was) and 0:4, one process,
# twice in turn. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
for r in 1 2; do
  timeout $(( 280 - SECONDS )) python3 benchmarks/config_sweep.py --patterns bias_relu,bias_gelu_tanh,bias_gelu_aux \
    --shapes 8192x4096x16384,8192x4096x11008 --configs 128x256x64_c1x1_cooperative \
    --tile-orders 0:0,0:1,0:4 --json /tmp/d/rule_$r.json > /tmp/d/rule_$r.log 2>&1
  echo "sweep $r rc=$? at $SECONDS s"
  tar -czf $OUT/callD.tar.gz -C /tmp d
done
