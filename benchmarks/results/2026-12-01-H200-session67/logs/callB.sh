#!/usr/bin/env bash
# session 67 call B: (1) swizzle 8 against evt's 4 at the wide grids the traffic rule swizzles
# (GPT-J's up projection, LLaMA's gate/up and its dgrad), fused and bare, 11 rounds in turn, a
# throwaway order timed first in each round; (2) the 78-case suite at main with its peers and the
# stages' host probe. Every kernel built on the CPU machine and carried. Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/commit)
mkdir -p $OUT/logs $OUT/gemm_suite; cp devcalls/callB.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
sweep() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/config_sweep.py "$@" --bare --rounds 11 --tile-orders 0:1,0:4,0:8 \
    --json $OUT/sweep_$name.json > $OUT/logs/sweep_$name.txt 2>&1
  echo "$name rc=$? at $SECONDS s"; tail -n 2 $OUT/logs/sweep_$name.txt | cut -c1-200
}
sweep s8_gptj 80 --patterns bias_relu,bias_gelu_aux --configs 128x256x64_c1x1_cooperative --shapes 8192x16384x4096
sweep s8_llama 120 --patterns swiglu,dgrad_swiglu --configs 128x128x64_c1x1_pingpong --shapes 8192x11008x4096,8192x14336x4096
left=$((585 - SECONDS))
OPS='bias*,dgrad*,residual*,layernorm*,swiglu*,batchnorm*,softmax*,ce_*,attention*'
timeout $left python3 -m evt.cli bench --baselines mm,cublaslt,evt,compile --out $OUT/gemm_suite \
  --only "$OPS" --time-budget $((left - 12)) --item-timeout 120 > $OUT/logs/bench_B.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 4 $OUT/logs/bench_B.log | cut -c1-200
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-B.tar.xz 2>&1 | tail -1
