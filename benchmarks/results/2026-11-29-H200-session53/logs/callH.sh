#!/usr/bin/env bash
# session 53 call H: the two copy-into-rows GPU tests after sharing their launch checks
# (launch_without_fallback), before the commit.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k "laid_out_against or tma_cannot_read" > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 2 /tmp/d/configs_tests.txt
tar -czf $OUT/callH.tar.gz -C /tmp d
