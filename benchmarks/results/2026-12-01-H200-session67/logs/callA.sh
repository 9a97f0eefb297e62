#!/usr/bin/env bash
# session 67 call A: the raster order with a swizzle at the six kernels the traffic model names
# (session 66, section 5): fused and bare, every order 0/1/2 x swizzle 1/2/4/8, 5 rounds in turn.
# Kernels built on the CPU machine and carried (.kpack). Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callA.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
ORD=0:0,0:2,0:4,0:8,1:1,1:2,1:4,1:8,2:1,2:2,2:4,2:8
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/config_sweep.py "$@" --bare --rounds 5 --tile-orders $ORD \
    --json $OUT/sweep_$name.json > $OUT/logs/sweep_$name.txt 2>&1
  echo "$name rc=$? at $SECONDS s"; tail -n 2 $OUT/logs/sweep_$name.txt | cut -c1-200
}
sweep swiglu 150 --patterns swiglu --configs 128x128x64_c1x1_pingpong --shapes 8192x11008x4096,8192x14336x4096,8192x5632x2048
sweep gptj 120 --patterns bias_relu --configs 128x256x64_c1x1_cooperative --shapes 8192x16384x4096,8192x4096x16384
sweep llama_step 120 --steps step/llama --regions f2,b4 --configs 128x128x64_c1x1_pingpong
sweep projection_head 120 --steps step/projection_head --configs 128x128x64_c1x1_pingpong,128x256x64_c1x1_cooperative
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-A.tar.xz 2>&1 | tail -1
