#!/usr/bin/env bash
# session 48 call E: the training steps of GPT-2, BERT (the exact GELU's bf16 form) and LLaMA
# (SwiGLU's shared sigmoid) on real kernels against fp32 eager; their kernels built here first
# (16 cores). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/e
timeout 300 python3 scripts/kernel_pack.py build --tests models > /tmp/e/build.txt 2>&1
echo "build rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/e/build.txt | tail -n 3
timeout $(( 570 - SECONDS )) python3 -m pytest -q -m gpu tests/test_gpu_models.py -k "training_step_matches_fp32" -p no:cacheprovider > /tmp/e/models_tests.txt 2>&1
echo "models tests rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/e/models_tests.txt | tail -n 10
grep -h "C7510\|lmem\|local memory" $EVT_CACHE_DIR/*/build.log 2>/dev/null | head -5
tar -czf $OUT/callE.tar.gz -C /tmp e
