#!/usr/bin/env bash
# session 61 call A: (1) the no-wait mystery: BERT's cold compile, waiting first, then under
# EVT_WAIT_KERNELS=0 (the order session 60 ran the other way), each child reporting its build
# timeline (when kernels were queued, started, ended; the C++ launch path's build and wait);
# (2) HF GPT-2's step under mode="reduce-overhead" (CUDA graph trees) for evt and torch.compile in turn.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
nproc; uptime
timeout 330 python3 scripts/compile_targets.py --step step/bert --runs evt,nowait --out /tmp/d/compile_targets.json > /tmp/d/compile_targets.txt 2>&1
echo "targets rc=$? at $SECONDS s"; cut -c1-700 /tmp/d/compile_targets.txt
left=$((575 - SECONDS))
timeout $left python3 scripts/hf_step_time.py --models gpt2 --mode reduce-overhead --dim 1024 --heads 16 --seq 512 --batch 16 --rounds 5 \
  --json /tmp/d/gpt2_ro.json > /tmp/d/time_gpt2_ro.txt 2>&1
echo "time rc=$? at $SECONDS s"; grep -B2 -A4 "^==" /tmp/d/time_gpt2_ro.txt | cut -c1-400; grep -i "error\|fail" /tmp/d/time_gpt2_ro.txt | head -5 | cut -c1-300
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-A.tar.xz 2>&1 | tail -1
tar -czf $OUT/callA.tar.gz -C /tmp d
