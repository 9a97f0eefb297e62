#!/usr/bin/env bash
# session 60 call A: session 59's GPU reruns. HF GPT-2 under dynamic=True (the same_size fix) and
# the nn catalog under dynamic=True at two sizes (the test rewritten to compile the module).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 320 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2_under -rA > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -6 | cut -c1-400
timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_nn_modules.py -p no:cacheprovider -k under_dynamic -rA --durations=0 > /tmp/d/gpu_nn_dynamic.txt 2>&1
echo "nn rc=$? at $SECONDS s"; grep -E "passed|failed|PASSED|FAILED|Error|assert" /tmp/d/gpu_nn_dynamic.txt | tail -12 | cut -c1-400
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callA.tar.gz -C /tmp d
