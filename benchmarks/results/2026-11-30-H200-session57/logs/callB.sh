#!/usr/bin/env bash
# session 57 call B: the GPU tier's Mixtral with every token routed to all four experts
# (tests/test_gpu_hf_models.py; call A's top-2 Mixtral failed on routing flips), then a 2-layer
# Hugging Face LLaMA's training step (dim 2048, 16 heads, batch 4 x 1024 tokens, vocab 32768)
# under evt and torch.compile in turn (scripts/hf_step_time.py), bf16. Kernels built on the CPU
# machine and carried.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite  # transformers 5.24 and its deps, pruned to the models tested
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -k mixtral_dense -p no:cacheprovider > /tmp/d/gpu_mixtral.txt 2>&1
echo "tests rc=$? at $SECONDS s"; grep -E "passed|failed|Error" /tmp/d/gpu_mixtral.txt | tail -5 | cut -c1-300
timeout 330 python3 scripts/hf_step_time.py --models llama --dim 2048 --heads 16 --seq 1024 --batch 4 \
  --json /tmp/d/llama.json > /tmp/d/time_llama.txt 2>&1
echo "llama rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_llama.txt; grep -h "compiled kernel" /tmp/d/*.txt | head -5
tail -3 /tmp/d/time_llama.txt | cut -c1-300
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz 2>&1 | tail -1
tar -czf $OUT/callB.tar.gz -C /tmp d
