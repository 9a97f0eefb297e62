#!/usr/bin/env bash
# session 60 call C: EVT_WAIT_KERNELS=0 on real kernels: the MLP's GPU tests with an empty kernel
# cache (as run and under CUDA graphs), then the compile targets with the no-wait cold start.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 220 python3 -m pytest -q -m gpu tests/test_gpu_mlp.py -p no:cacheprovider -k no_wait -rA --durations=0 > /tmp/d/gpu_mlp_no_wait.txt 2>&1
echo "mlp rc=$? at $SECONDS s"; grep -E "passed|failed|PASSED|FAILED|Error|assert" /tmp/d/gpu_mlp_no_wait.txt | tail -8 | cut -c1-400
timeout $((575 - SECONDS)) python3 scripts/compile_targets.py --step step/bert --no-wait --out /tmp/d/compile_targets.json > /tmp/d/compile_targets.txt 2>&1
echo "targets rc=$? at $SECONDS s"; cat /tmp/d/compile_targets.txt | cut -c1-400
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callC.tar.gz -C /tmp d
