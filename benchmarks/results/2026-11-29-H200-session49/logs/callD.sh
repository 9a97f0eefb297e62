#!/usr/bin/env bash
# session 49 call D: (1) the five model training steps on real kernels against fp32 eager with
# this session's graph changes (recompute_outside / recompute_for_backward copy their chains in
# order); (2) LLaMA's step with o_proj's region and SwiGLU's forward region left unfused, 21
# rounds (call A: SwiGLU's forward 0.991, p 0.23; o_proj's not measured). Kernels built here
# (.kpack). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_models.py -k training_step_matches_fp32 > /tmp/d/models_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; tail -n 5 /tmp/d/models_tests.txt
tar -czf $OUT/callD.tar.gz -C /tmp d
timeout $(( 540 - SECONDS )) python3 scripts/step_variants.py --steps step/llama --rounds 21 --variant "default:" \
  --variant "no_f0: EVT_UNFUSE=evt_f0_*" --variant "no_f1: EVT_UNFUSE=evt_f1_*" > /tmp/d/sv.txt 2>&1
echo "sv rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/d/sv.txt | grep "^|"
tar -czf $OUT/callD.tar.gz -C /tmp d
