#!/usr/bin/env bash
# session 48 call C: the 16-bit GELUs as max(z, 0) - x 2^P(x) (12 instructions for bf16) on the
# GPU: test_gpu_ops (the float64 check of both 16-bit forms), the functor sweep again (evt's own,
# the fp16 form, the tanh GELU; twice), then evt and cuBLAS again on bias_gelu and bias_gelu_aux
# in the full run. Carry .whl, .kpack, out/bench-full, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/c
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_ops.py -p no:cacheprovider > /tmp/c/ops_tests.txt 2>&1
echo "ops tests rc=$? at $SECONDS s"; tail -n 6 /tmp/c/ops_tests.txt
for i in 1 2; do
  timeout 120 python3 benchmarks/config_sweep.py --patterns bias_gelu,bias_gelu_aux \
    --shapes 8192x3072x768,8192x4096x1024 --configs 128x128x64_c1x1_pingpong \
    --functor ";gelu_for_bf16=evt::GeluForF16;gelu_for_bf16=evt::GeluTanh" \
    --json /tmp/c/sweep$i.json > /tmp/c/sweep$i.txt 2>&1
  echo "sweep $i rc=$? at $SECONDS s"; grep -A14 "^pattern/shape" /tmp/c/sweep$i.txt
done
EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha) EVT_BENCH_CALL_S=$(( 580 - SECONDS )) bash scripts/bench_full.sh 1 \
  --only 'bias_gelu/*,bias_gelu_aux/*' --baselines mm,evt --redo > /tmp/c/bench.txt 2>&1
echo "bench rc=$? at $SECONDS s"; grep "\] bias_gelu" /tmp/c/bench.txt | tail -n 24
grep -h "C7510\|lmem\|local memory" $EVT_CACHE_DIR/*/build.log 2>/dev/null | head -5
tar -czf $OUT/callC.tar.gz -C /tmp c
