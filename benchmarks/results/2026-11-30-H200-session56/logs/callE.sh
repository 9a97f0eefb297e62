#!/usr/bin/env bash
# session 56 call E: the whole nn catalog on real kernels at the session's code (pointwise
# convolutions as GEMMs, sink_views' channels-last inputs under a permute, fold_views' permutes).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
timeout 430 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
grep -c "compiled kernel" /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callE.tar.gz -C /tmp d
