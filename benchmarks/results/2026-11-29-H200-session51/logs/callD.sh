#!/usr/bin/env bash
# session 51 call D: operands expanded over a batch (L stride 0) on the GPU: dense experts'
# bmm(x.expand(4, -1, -1), w) region launched (profitability off) and the catalog's two modules
# with such bmms trained against fp32 eager. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "dense_experts or addmm_alpha_beta" > /tmp/d/expanded_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; grep -v "^DEBUG\|^INFO" /tmp/d/expanded_tests.txt | grep -v "warn\|^  \|^$" | tail -n 25
tar -czf $OUT/callD.tar.gz -C /tmp d
