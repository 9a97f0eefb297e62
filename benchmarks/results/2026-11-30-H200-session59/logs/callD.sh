#!/usr/bin/env bash
# session 59 call D: HF GPT-2 under dynamic=True against its static regions and fp32 eager once
# more (call C's lost the LM head's dgrad region: sizes.same_size now proves products factor by
# factor), then four nn catalog modules under dynamic=True at two sizes on real kernels.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 220 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2_under -rA > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -6 | cut -c1-400
timeout $((420 - SECONDS)) python3 -m pytest -q -m gpu tests/test_gpu_nn_modules.py -p no:cacheprovider -k under_dynamic -rA > /tmp/d/gpu_nn_dynamic.txt 2>&1
echo "nn rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_nn_dynamic.txt | tail -8 | cut -c1-400
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callD.tar.gz -C /tmp d
