#!/usr/bin/env bash
# session 58 call B: the scalar tests again (call A's first test built its inputs wrong), and
# HF GPT-2 under dynamic=True on CUDA probed: regions, unfused GEMMs and the graphs (call A: its
# tanh GELU backward did not fuse there, as it does on the CPU). Call A's kernels carried.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_scalar_loads.py -p no:cacheprovider > /tmp/d/gpu_scalar.txt 2>&1
echo "scalar rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_scalar.txt | tail -8 | cut -c1-300
EVT_DEBUG=2 timeout 200 python3 devcalls/gpt2_dyn.py > /tmp/d/gpt2_dyn.txt 2> /tmp/d/gpt2_dyn_debug.txt
echo "probe rc=$? at $SECONDS s"; cat /tmp/d/gpt2_dyn.txt | cut -c1-200 | head -70
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz 2>&1 | tail -1
tar -czf $OUT/callB.tar.gz -C /tmp d
