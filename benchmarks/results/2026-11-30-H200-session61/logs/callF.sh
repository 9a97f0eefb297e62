#!/usr/bin/env bash
# session 61 call F: call E's failed GPU test, its child now on a cache of the step's kernels
# alone (call E's cache had the launch path call C built with the same slow compiler, carried).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_mlp.py -p no:cacheprovider -k launch_path_when -rA --durations=0 > /tmp/d/gpu_mlp_launch_path.txt 2>&1
echo "mlp rc=$? at $SECONDS s"; grep -E "passed|failed|ok:|Error|assert" /tmp/d/gpu_mlp_launch_path.txt | tail -8 | cut -c1-400
tar -czf $OUT/callF.tar.gz -C /tmp d
