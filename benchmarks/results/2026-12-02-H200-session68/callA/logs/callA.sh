#!/usr/bin/env bash
# session 68 call A: the swizzle rule's launch plan on real kernels (GPU tests), then the cluster
# variants of the LLaMA up projection's SwiGLU and its dgrad at LLaMA-3's shape against evt's
# pick, every swizzle in turn (7 rounds, a throwaway order 1:1 first). Kernels built on the CPU
# machine and carried (the GPU tests' own build here). Carry .whl, .kpack. Outputs in one tar.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
R=/tmp/callA; rm -rf $R; mkdir -p $R/logs; cp devcalls/callA.sh $R/logs/
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch; print(torch.__version__, torch.version.cuda)"
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -p no:cacheprovider \
  -k "wide_grid or other_raster or wide_ping_pong" > $R/logs/gpu_tests_A.txt 2>&1
echo "gpu tests rc=$? at $SECONDS s"; tail -3 $R/logs/gpu_tests_A.txt
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/config_sweep.py "$@" --rounds 7 --tile-orders 1:1,0:1,0:2,0:4,0:8 \
    --json $R/sweep_$name.json > $R/logs/sweep_$name.txt 2>&1
  echo "$name rc=$? at $SECONDS s"
}
PP=128x128x64_c1x1_pingpong,128x128x64_c2x1_pingpong,128x128x64_c1x2_pingpong
sweep swiglu_llama3 150 --patterns swiglu --shapes 8192x14336x4096 \
  --configs $PP,128x256x64_c1x1_cooperative,128x256x64_c2x1_cooperative
sweep dgrad_swiglu_llama3 150 --patterns dgrad_swiglu --shapes 8192x14336x4096 \
  --configs $PP,128x256x64_c1x1_cooperative_sc3,128x256x64_c2x1_cooperative_sc3
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $R/kernels-A.tar.xz 2>&1 | tail -1
tar -czf $OUT/callA.tar.gz -C $R .
