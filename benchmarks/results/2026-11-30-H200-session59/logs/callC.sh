#!/usr/bin/env bash
# session 59 call C: the nested-batch GPU tier (GPT-2 under dynamic=True reading heads in place
# with symbolic strides; call B's run timed out building the fixture's kernels, carried now), then
# HF GPT-2 under dynamic=True against fp32 eager again after the guard-free size comparisons.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 330 python3 -m pytest -q -m gpu tests/test_gpu_nested_batch.py -p no:cacheprovider -rA > /tmp/d/gpu_nested.txt 2>&1
echo "nested rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_nested.txt | tail -8 | cut -c1-400
timeout $((560 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2_under -rA > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -6 | cut -c1-400
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-C.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callC.tar.gz -C /tmp d
