#!/usr/bin/env bash
# session 68 call D: the 78-case GEMM+epilogue suite at main with its peers (the bare GEMM,
# cuBLASLt, torch.compile) and each stage's host probe. Every kernel built on the CPU machine
# and carried. Carry .whl, .kpack. Outputs in one tar.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/commit)
R=/tmp/callD; rm -rf $R; mkdir -p $R/logs $R/gemm_suite; cp devcalls/callD.sh $R/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
OPS='bias*,dgrad*,residual*,layernorm*,swiglu*,batchnorm*,softmax*,ce_*,attention*'
timeout 470 python3 -m evt.cli bench --baselines mm,cublaslt,evt,compile --out $R/gemm_suite \
  --only "$OPS" --time-budget 455 --item-timeout 120 > $R/logs/bench_D.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 4 $R/logs/bench_D.log | cut -c1-200
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $R/kernels-D.tar.xz 2>&1 | tail -1
tar -czf $OUT/callD.tar.gz -C $R .
