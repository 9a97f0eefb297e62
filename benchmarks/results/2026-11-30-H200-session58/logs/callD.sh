#!/usr/bin/env bash
# session 58 call D: call C's GPU tests again with room (its 200 s ran out in the dynamic test,
# which compiles GPT-2 three times: static, dynamic, fp32 eager's comparison), then the static
# GPT-2 step timed in turn with torch.compile at call C's sizes (5 rounds), for the dynamic
# step's ratio to have its static counterpart from the same machine. Kernels carried (.kpack:
# built on the CPU machine, and by calls A and C).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 380 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2 > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -8 | cut -c1-400
left=$((560 - SECONDS))
timeout $left python3 scripts/hf_step_time.py --models gpt2 --dim 1024 --heads 16 --seq 512 --batch 16 --rounds 5 \
  --json /tmp/d/gpt2_static.json > /tmp/d/time_gpt2_static.txt 2>&1
echo "time rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_static.txt | cut -c1-400
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz 2>&1 | tail -1
tar -czf $OUT/callD.tar.gz -C /tmp d
