#!/usr/bin/env bash
# session 59 call A: HF GPT-2 under dynamic=True on real kernels against float32 eager (and its
# regions against the static ones), then its training step timed again in turn with torch.compile
# (both dynamic=True), now that recompute_outside takes dynamic shapes. Kernels built here.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2_under -rA > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -8 | cut -c1-400
timeout $((560 - SECONDS)) python3 scripts/hf_step_time.py --models gpt2 --dynamic --dim 1024 --heads 16 --seq 512 --batch 16 \
  --json /tmp/d/gpt2_dynamic.json > /tmp/d/time_gpt2_dynamic.txt 2>&1
echo "time rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_dynamic.txt | cut -c1-400
grep -h "capture failed" /tmp/d/time_gpt2_dynamic.txt | head -3 | cut -c1-200
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callA.tar.gz -C /tmp d
