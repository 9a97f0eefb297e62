#!/usr/bin/env bash
# session 49 call C: why is LLaMA's step with every evt region left unfused (EVT_UNFUSE=evt_*)
# 1.3% slower than torch.compile under CUDA graphs (call B)? Kernel by kernel, from torch.profiler
# traces of 10 steps (scripts/step_trace.py): evt's default, evt with no region, torch.compile.
# Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/c
timeout 200 python3 scripts/step_trace.py --steps step/llama --baselines evt,compile --trace /tmp/tr1 > /tmp/c/trace1.txt 2>&1
echo "trace1 rc=$? at $SECONDS s"
EVT_UNFUSE='evt_*' timeout 150 python3 scripts/step_trace.py --steps step/llama --baselines evt --trace /tmp/tr2 > /tmp/c/trace2.txt 2>&1
echo "trace2 rc=$? at $SECONDS s"
python3 devcalls/kdiff.py none /tmp/tr2/step_llama-evt.json compile /tmp/tr1/step_llama-compile.json > /tmp/c/none_vs_compile.txt 2>&1
python3 devcalls/kdiff.py evt /tmp/tr1/step_llama-evt.json none /tmp/tr2/step_llama-evt.json > /tmp/c/evt_vs_none.txt 2>&1
head -40 /tmp/c/none_vs_compile.txt | cut -c1-150
tar -czf $OUT/callC.tar.gz -C /tmp c
