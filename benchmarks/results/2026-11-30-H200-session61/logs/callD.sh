#!/usr/bin/env bash
# session 61 call D: HF GPT-2's step under dynamic=True in turn with torch.compile at f8ebca6
# (fold_one_hot_sums reverted; call C's profile put evt's GPU time at 0.974 of torch.compile's),
# 9 rounds; then HF LLaMA's step under mode="reduce-overhead" (CUDA graph trees) in turn.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 230 python3 scripts/hf_step_time.py --models gpt2 --dynamic --dim 1024 --heads 16 --seq 512 --batch 16 --rounds 9 \
  --json /tmp/d/gpt2_dynamic.json > /tmp/d/time_gpt2_dynamic.txt 2>&1
echo "dyn rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_dynamic.txt | cut -c1-400
timeout $((570 - SECONDS)) python3 scripts/hf_step_time.py --models llama --mode reduce-overhead --dim 2048 --heads 16 --seq 1024 --batch 4 --rounds 5 \
  --json /tmp/d/llama_ro.json > /tmp/d/time_llama_ro.txt 2>&1
echo "llama rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_llama_ro.txt | cut -c1-400; grep -i "error\|Traceback" /tmp/d/time_llama_ro.txt | head -3 | cut -c1-300
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz 2>&1 | tail -1
tar -czf $OUT/callD.tar.gz -C /tmp d
