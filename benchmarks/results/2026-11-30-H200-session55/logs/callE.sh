#!/usr/bin/env bash
# session 55 call E: the whole nn catalog on real kernels at the session's last code (the
# heuristic's reductions over M, the column statistics' header, the six new blocks).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 480 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-E.tar.xz > /dev/null 2>&1
tar -czf $OUT/callE.tar.gz -C /tmp d
