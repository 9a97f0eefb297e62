#!/usr/bin/env bash
# session 46 call D: the model fuzzer on real kernels with a causal mask computed from index
# vectors in the scores' epilogue (EVT_SDPA=0 keeps the math attention; kernels packed)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_SDPA=0
timeout 100 python3 scripts/model_fuzz.py --device cuda --mask causal --count 6 --seed 72000 2>&1 | grep -v "^W1129\|Warning" | tail -15
echo "fuzz 1 rc=$? at $SECONDS s"
left=$(( 200 - SECONDS )); [ $left -gt 40 ] && timeout $left python3 scripts/model_fuzz.py --device cuda --mask causal --count 8 --seed 72200 2>&1 | grep -v "^W1129\|Warning" | tail -15
echo "fuzz 2 rc=$? at $SECONDS s"
