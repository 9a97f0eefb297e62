#!/usr/bin/env bash
# session 57 call C: Hugging Face models' training steps (two layers) under evt and torch.compile
# in turn in one process (scripts/hf_step_time.py, 11 rounds), bf16: LLaMA (dim 2048, 16 heads,
# 4 x 1024 tokens, vocab 32768), then GPT-2 and BERT (dim 1024, 16 heads, 16 x 512 tokens, vocab
# 32768). Kernels built on the CPU machine and carried. (Call B's try failed: its steps
# accumulated gradients, which a CUDA graph's capture refused; they start from none now.)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite  # transformers 5.24 and its deps, pruned to the models tested
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 250 python3 scripts/hf_step_time.py --models llama --dim 2048 --heads 16 --seq 1024 --batch 4 \
  --json /tmp/d/llama.json > /tmp/d/time_llama.txt 2>&1
echo "llama rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_llama.txt | cut -c1-400
timeout 300 python3 scripts/hf_step_time.py --models gpt2,bert --dim 1024 --heads 16 --seq 512 --batch 16 \
  --json /tmp/d/gpt2_bert.json > /tmp/d/time_gpt2_bert.txt 2>&1
echo "gpt2,bert rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_bert.txt | cut -c1-400
grep -h "compiled kernel\|capture failed" /tmp/d/time_*.txt | head -5
tail -2 /tmp/d/time_gpt2_bert.txt | cut -c1-300
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-C.tar.xz 2>&1 | tail -1
tar -czf $OUT/callC.tar.gz -C /tmp d
