#!/usr/bin/env bash
# session 58 call A: 0-d scalars on the device and in host memory on real kernels
# (tests/test_gpu_scalar_loads.py: kernels built on the CPU machine and carried), the nn
# catalog's three modules that read 0-d tensors (their kernels' launch code changed: built
# here), and HF GPT-2 under dynamic=True against static (its tanh GELU backward reads a float
# Dynamo passes as a 0-d CPU tensor; its LM head's dgrad keeps the final norm's backward:
# fold_whole_slices), kernels built here.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
ls "$EVT_CACHE_DIR" | wc -l > /tmp/d/cache_before.txt
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_scalar_loads.py -p no:cacheprovider > /tmp/d/gpu_scalar.txt 2>&1
echo "scalar rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_scalar.txt | tail -8 | cut -c1-300
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_nn_modules.py -p no:cacheprovider \
  -k "rezero_scalars or clip_loss or kl_smooth_l1_bce" > /tmp/d/gpu_nn.txt 2>&1
echo "nn rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_nn.txt | tail -8 | cut -c1-300
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2 > /tmp/d/gpu_hf.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -8 | cut -c1-300
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
grep -c "DNDEBUG" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -2
tar -czf $OUT/callA.tar.gz -C /tmp d
