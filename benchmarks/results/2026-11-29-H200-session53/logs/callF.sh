#!/usr/bin/env bash
# session 53 call F: after the review mend (copy_into_rows) and the catalog's bf16_unfused:
# glu and transposed_batchnorm in the nn catalog, the operand-copy configs test.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "glu or transposed_batchnorm" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 2 /tmp/d/nn_modules_tests.txt
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k "laid_out_against" > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 2 /tmp/d/configs_tests.txt
tar -czf $OUT/callF.tar.gz -C /tmp d
