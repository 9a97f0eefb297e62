#!/usr/bin/env bash
# session 59 call B: the nested-batch GPU tier with GPT-2 under dynamic=True (heads read in place
# with symbolic strides), and a profile of HF GPT-2's step under evt static / dynamic and
# torch.compile dynamic / static (devcalls/profile_gpt2.py). Kernels: .kpack plus built here.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_nested_batch.py -p no:cacheprovider -rA > /tmp/d/gpu_nested.txt 2>&1
echo "nested rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_nested.txt | tail -8 | cut -c1-400
timeout $((570 - SECONDS)) python3 devcalls/profile_gpt2.py > /tmp/d/profile_gpt2.txt 2>&1
echo "profile rc=$? at $SECONDS s"; grep "^==" /tmp/d/profile_gpt2.txt | cut -c1-300
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callB.tar.gz -C /tmp d
