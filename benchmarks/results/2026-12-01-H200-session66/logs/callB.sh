#!/usr/bin/env bash
# session 66 call B: the 78 GEMM+epilogue cases at one commit: the bare cuBLAS GEMM, cuBLASLt's
# fused epilogues, evt (its 46 kernels built here and carried), torch.compile with the time left.
# Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/commit)
mkdir -p $OUT/logs $OUT/gemm_suite; cp devcalls/callB.sh $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
OPS='bias*,dgrad*,residual*,layernorm*,swiglu*,batchnorm*,softmax*,ce_*,attention*'
timeout 525 python3 -m evt.cli bench --baselines mm,cublaslt,evt,compile --out $OUT/gemm_suite \
  --only "$OPS" --time-budget 515 --item-timeout 120 > $OUT/logs/bench_B.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 4 $OUT/logs/bench_B.log | cut -c1-200
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-B.tar.xz 2>&1 | tail -1
