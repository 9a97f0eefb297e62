#!/usr/bin/env bash
# session 52 call D: every candidate config of the batch_statistics spec (13: stream-K, 128x64,
# 128x192, clusters, ping-pong) against the reference on whole tiles and residues
# (tests/test_gpu_configs.py; its kernels built here, carried in .kpack).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k "batch_statistics" > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 5 /tmp/d/configs_tests.txt
tar -czf $OUT/callD.tar.gz -C /tmp d
