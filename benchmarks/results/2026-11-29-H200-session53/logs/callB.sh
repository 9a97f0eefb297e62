#!/usr/bin/env bash
# session 53 call B: evt::fused_gemm with Inductor's needs_fixed_stride_order tag (call A's
# patchtst step fell back: a region's input reached it column-major). nn catalog modules with
# permutes and BatchNorm on real kernels against fp32 eager; the patchtst step again (eager, evt,
# torch.compile, in turn), and GPT-2's, BERT's and LLaMA's steps in turn with torch.compile.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "transposed_batchnorm or encoder_pre_norm_gelu or linear_batchnorm or einsum_heads or decoder or encoder_sequence_first" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
left=$(( 580 - SECONDS ))
timeout $left python3 -m evt.cli bench --baselines eager,evt,compile,in-turn --out /tmp/d/bench \
  --only 'step/patchtst,step/gpt2,step/llama,step/bert' --time-budget $(( left - 15 )) --item-timeout 200 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step" /tmp/d/bench.log | tail -n 20
tar -czf $OUT/callB.tar.gz -C /tmp d
