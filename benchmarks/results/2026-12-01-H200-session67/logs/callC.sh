#!/usr/bin/env bash
# session 67 call C, at 04b0579 (swizzle rule): (1) the suite's cases whose launch the new swizzle
# rule changes (GPT-J's up projection, the LLaMAs' SwiGLU and dgrad), evt against the bare GEMM;
# (2) host time per call: a fresh process (devcalls/host_probe.py) against the bench's stage
# process (isolated, then --isolate none), each with its host probe; (3) GPT-2's fp16 autocast
# GPU test with the time left. Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/commit)
mkdir -p $OUT/logs; cp devcalls/callC.sh devcalls/host_probe.py $OUT/logs/
date +%T; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv,noheader
HOST='bias/bert,bias_gelu/bert,layernorm_stats/vit'
timeout 90 python3 devcalls/host_probe.py "$HOST" > $OUT/logs/host_standalone.txt 2>$OUT/logs/host_standalone.err
echo "standalone rc=$? at $SECONDS s"; cat $OUT/logs/host_standalone.txt | cut -c1-200
SWZ='bias_relu/gptj,bias_gelu/gptj,bias_gelu_tanh/gptj,bias_gelu_aux/gptj,bias_gelu_tanh_aux/gptj,swiglu/llama,swiglu/llama3,dgrad_swiglu/llama,dgrad_swiglu/llama3'
timeout 200 python3 -m evt.cli bench --baselines mm,evt --out $OUT/swizzle --only "$SWZ,$HOST" \
  --time-budget 190 --item-timeout 60 > $OUT/logs/bench_C1.log 2>&1
echo "bench C1 rc=$? at $SECONDS s"; tail -n 2 $OUT/logs/bench_C1.log | cut -c1-200
timeout 60 python3 -m evt.cli bench --baselines evt --out $OUT/host_none --only "$HOST" --isolate none \
  --time-budget 55 --item-timeout 40 > $OUT/logs/bench_C2.log 2>&1
echo "bench C2 rc=$? at $SECONDS s"; tail -n 2 $OUT/logs/bench_C2.log | cut -c1-200
left=$((560 - SECONDS))
if [ $left -gt 120 ]; then
  timeout $left python3 -m pytest -v -m gpu tests/test_gpu_models.py -k "autocast and gpt2-dtype2" \
    > $OUT/logs/gpu_tests_C.txt 2>&1
  echo "gpu tests rc=$? at $SECONDS s"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/logs/gpu_tests_C.txt | tail -5
fi
date +%T; nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-C.tar.xz 2>&1 | tail -1
