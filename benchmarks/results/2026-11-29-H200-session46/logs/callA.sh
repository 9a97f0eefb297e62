#!/usr/bin/env bash
# session 46 call A: GPU tests (batched incl. the causal mask from index vectors; configs), the index-mask
# step variants on the three attention_scores cases, then part 1 --redo on attention_scores/* (evt's row)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/a
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_batched.py -p no:cacheprovider > /tmp/a/batched_tests.txt 2>&1
echo "batched tests rc=$? at $SECONDS s"; tail -15 /tmp/a/batched_tests.txt
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -p no:cacheprovider > /tmp/a/configs_tests.txt 2>&1
echo "configs tests rc=$? at $SECONDS s"; tail -15 /tmp/a/configs_tests.txt
timeout 150 python3 scripts/step_variants.py --steps attention_scores/gpt2,attention_scores/bert,attention_scores/vit --variant "default:" --variant "loaded: EVT_INDEX_MASKS=0" > /tmp/a/variants.txt 2>&1
echo "variants rc=$? at $SECONDS s"; grep -v Warning /tmp/a/variants.txt | tail -30
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
left=$(( 585 - SECONDS )); [ $left -gt 60 ] && EVT_BENCH_CALL_S=$left bash scripts/bench_full.sh 1 --redo --only attention_scores/gpt2,attention_scores/bert,attention_scores/vit > /tmp/p1.txt 2>&1
echo "part 1 redo rc=$? at $SECONDS s"; grep -E "attention_scores" /tmp/p1.txt | tail -30
cp /tmp/p1.txt /tmp/a/; tar -czf $OUT/callA.tar.gz -C /tmp a
