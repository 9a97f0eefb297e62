#!/usr/bin/env bash
# session 67 call E: the swizzle rule's changes at configs evt does not pick at the suite's shapes
# (clusters, 128x192, 128x256 at LLaMA-3's): swizzle 2, 4, 8 in turn, 9 rounds, a throwaway order
# first. Kernels built on the CPU machine and carried. Carry .whl, .kpack. Outputs in one tar.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
R=/tmp/callE; rm -rf $R; mkdir -p $R/logs; cp devcalls/callE.sh $R/logs/
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/config_sweep.py "$@" --bare --rounds 9 --tile-orders 0:1,0:2,0:4,0:8 \
    --json $R/sweep_$name.json > $R/logs/sweep_$name.txt 2>&1
  echo "$name rc=$? at $SECONDS s"
}
sweep clusters_gptj 120 --patterns bias_relu --configs 128x256x64_c2x1_cooperative,128x192x64_c1x1_cooperative,128x128x64_c1x2_pingpong --shapes 8192x16384x4096
sweep clusters_llama3 90 --patterns swiglu --configs 128x256x64_c1x1_cooperative,128x128x64_c1x2_pingpong --shapes 8192x14336x4096
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $R/kernels-E.tar.xz 2>&1 | tail -1
tar -czf $OUT/callE.tar.gz -C $R .
