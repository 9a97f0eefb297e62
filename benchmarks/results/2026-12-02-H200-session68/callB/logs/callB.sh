#!/usr/bin/env bash
# session 68 call B: GPT-J's up and down projections (bias + ReLU) in 128x256 tiles with and
# without clusters, 128x192 and 128x128 ping-pong with a 1x2 cluster, every swizzle in turn
# (7 rounds, a throwaway order 1:1 first): session 67's lost call E, and clusters at its shapes.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
R=/tmp/callB; rm -rf $R; mkdir -p $R/logs; cp devcalls/callB.sh $R/logs/
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/config_sweep.py "$@" --rounds 7 --tile-orders 1:1,0:1,0:2,0:4,0:8 \
    --json $R/sweep_$name.json > $R/logs/sweep_$name.txt 2>&1
  echo "$name rc=$? at $SECONDS s"
}
C=128x256x64_c1x1_cooperative,128x256x64_c2x1_cooperative,128x256x64_c1x2_cooperative,128x192x64_c1x1_cooperative,128x128x64_c1x2_pingpong
sweep gptj_up 250 --patterns bias_relu --shapes 8192x16384x4096 --configs $C
sweep gptj_down 250 --patterns bias_relu --shapes 8192x4096x16384 --configs $C
python3 scripts/kernel_pack.py pack --new --out $R/kernels-B.tar.xz 2>&1 | tail -1
tar -czf $OUT/callB.tar.gz -C $R .
