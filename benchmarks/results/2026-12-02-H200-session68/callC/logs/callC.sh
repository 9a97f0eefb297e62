#!/usr/bin/env bash
# session 68 call C: GPT-J's up projection (8192 x 16384 x 4096) with the heavier epilogues
# (exact GELU, and exact or tanh GELU with the pre-activation stored): evt's 128x256 cooperative
# pick against 128x128 ping-pong with and without a 1x2 cluster, swizzle 4 and 8 in turn
# (7 rounds, a throwaway order 1:1 first). The ping-pong kernels build here (16 jobs).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
R=/tmp/callC; rm -rf $R; mkdir -p $R/logs; cp devcalls/callC.sh $R/logs/
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
C=128x256x64_c1x1_cooperative,128x128x64_c1x1_pingpong,128x128x64_c1x2_pingpong
timeout 150 python3 benchmarks/config_sweep.py --build-only --patterns bias_gelu,bias_gelu_aux,bias_gelu_tanh_aux \
  --shapes 8192x16384x4096 --configs $C > $R/logs/build.txt 2>&1
echo "build rc=$? at $SECONDS s"
for p in bias_gelu_aux bias_gelu_tanh_aux bias_gelu; do
  timeout 110 python3 benchmarks/config_sweep.py --patterns $p --shapes 8192x16384x4096 --configs $C \
    --rounds 7 --tile-orders 1:1,0:4,0:8 --json $R/sweep_$p.json > $R/logs/sweep_$p.txt 2>&1
  echo "$p rc=$? at $SECONDS s"
done
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $R/kernels-C.tar.xz 2>&1 | tail -1
tar -czf $OUT/callC.tar.gz -C $R .
