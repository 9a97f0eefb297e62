#!/usr/bin/env bash
# session 48 call D: test_gpu_ops (the 16-bit GELUs against float64, SwiGLU's backward from one
# shared sigmoid); the bf16 GELU A/B in one process (evt's own 12-instruction form; session 47's
# t form, GeluForBf16TForm, kept in the header for this call only; the tanh GELU), twice; then
# evt and cuBLAS again on dgrad_swiglu (its shared sigmoid) in the full run.
# Carry .whl, .kpack, out/bench-full, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_ops.py -p no:cacheprovider > /tmp/d/ops_tests.txt 2>&1
echo "ops tests rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/ops_tests.txt | tail -n 8
for i in 1 2; do
  timeout 120 python3 benchmarks/config_sweep.py --patterns bias_gelu,bias_gelu_aux \
    --shapes 8192x3072x768,8192x4096x1024 --configs 128x128x64_c1x1_pingpong \
    --functor ";gelu_for_bf16=evt::GeluForBf16TForm;gelu_for_bf16=evt::GeluTanh" \
    --json /tmp/d/sweep$i.json > /tmp/d/sweep$i.txt 2>&1
  echo "sweep $i rc=$? at $SECONDS s"; grep -A14 "^pattern/shape" /tmp/d/sweep$i.txt
done
EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha) EVT_BENCH_CALL_S=$(( 580 - SECONDS )) bash scripts/bench_full.sh 1 \
  --only 'dgrad_swiglu/*' --baselines mm,evt --redo > /tmp/d/bench.txt 2>&1
echo "bench rc=$? at $SECONDS s"; grep "\] dgrad_swiglu" /tmp/d/bench.txt | tail -n 8
grep -h "C7510\|lmem\|local memory" $EVT_CACHE_DIR/*/build.log 2>/dev/null | head -5
tar -czf $OUT/callD.tar.gz -C /tmp d
