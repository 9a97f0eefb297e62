#!/usr/bin/env bash
# session 57 call A: real Hugging Face models (tests/hf_catalog.py) trained in bf16 on real
# kernels against fp32 eager (tests/test_gpu_hf_models.py, eight models); the kernels were built
# on the CPU machine and carried (.kpack).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite  # transformers 5.24 and its deps, pruned to the models tested
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" 2>&1 | tail -2
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
ls "$EVT_CACHE_DIR" | wc -l > /tmp/d/cache_before.txt
timeout 500 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider > /tmp/d/gpu_hf.txt 2>&1
echo "tests rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_hf.txt | tail -20 | cut -c1-300
grep -h "compiled kernel" /tmp/d/gpu_hf.txt | head -5
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callA.tar.gz -C /tmp d
