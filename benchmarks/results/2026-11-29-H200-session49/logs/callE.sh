#!/usr/bin/env bash
# session 49 call E: the checkpointing GPU tests (full and selective; recompute_for_backward now
# copies its chains in order), their kernels built on the device. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/e
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_checkpointing.py > /tmp/e/checkpointing_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; tail -n 4 /tmp/e/checkpointing_tests.txt
tar -czf $OUT/callE.tar.gz -C /tmp e
