#!/usr/bin/env bash
# session 54 call B: after the exact-strides layout constraint (call A), the whole nn catalog on
# real kernels against fp32 eager, each module now also held to no input relaid at its launch;
# GPT-2's and BERT's dynamic-shape steps (symbolic strides in eager_input_vals); the MLP's tests.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 4 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
left=$(( 585 - SECONDS ))
timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_models.py tests/test_gpu_mlp.py -k "dynamic or test_gpu_mlp" > /tmp/d/models_tests.txt 2>&1
echo "models rc=$? at $SECONDS s"; tail -n 4 /tmp/d/models_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
