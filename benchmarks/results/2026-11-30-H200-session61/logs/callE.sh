#!/usr/bin/env bash
# session 61 call E, at f8ebca6: (1) the MLP's no-wait GPU tests (empty kernel caches: the C++
# launch path builds too, and is now loaded by a later call rather than waited for);
# (2) BERT's cold start: torch.compile cold and warm, then evt cold under EVT_WAIT_KERNELS=0,
# whose compile no longer waits for the C++ launch path's build.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 260 python3 -m pytest -q -m gpu tests/test_gpu_mlp.py -p no:cacheprovider -k no_wait -rA --durations=0 > /tmp/d/gpu_mlp_no_wait.txt 2>&1
echo "mlp rc=$? at $SECONDS s"; grep -E "passed|failed|PASSED|FAILED|Error|assert" /tmp/d/gpu_mlp_no_wait.txt | tail -8 | cut -c1-400
timeout $((570 - SECONDS)) python3 scripts/compile_targets.py --step step/bert --runs compile,nowait --out /tmp/d/compile_targets.json > /tmp/d/compile_targets.txt 2>&1
echo "targets rc=$? at $SECONDS s"; cut -c1-700 /tmp/d/compile_targets.txt
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callE.tar.gz -C /tmp d
