#!/usr/bin/env bash
# session 53 call E: the whole nn catalog (tests/test_gpu_nn_modules.py) on real kernels against
# fp32 eager after this session's runtime change (guards.copy_into_rows in every region call).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 4 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callE.tar.gz -C /tmp d
