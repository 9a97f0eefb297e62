#!/usr/bin/env bash
# session 57 call D: a 2-layer Hugging Face LLaMA's training step (dim 2048, 16 heads, 4 x 1024
# tokens, vocab 32768) under evt and torch.compile in turn (scripts/hf_step_time.py, 11 rounds),
# bf16, as run only (call C: torch.compile's CUDA graph capture of this step failed and left the
# process out of memory). Kernels built on the CPU machine and carried.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite  # transformers 5.24 and its deps, pruned to the models tested
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 250 python3 scripts/hf_step_time.py --models llama --dim 2048 --heads 16 --seq 1024 --batch 4 \
  --no-graphs --json /tmp/d/llama.json > /tmp/d/time_llama.txt 2>&1
echo "llama rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_llama.txt | cut -c1-400
grep -h "compiled kernel" /tmp/d/time_*.txt | head -5; tail -2 /tmp/d/time_llama.txt | cut -c1-300
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz 2>&1 | tail -1
tar -czf $OUT/callD.tar.gz -C /tmp d
