#!/usr/bin/env bash
# session 45 call A: the staged stores' first GPU run (tests, ViT's scores step-variant, config sweep),
# then part 4 and part 3 --redo on attention_scores/vit
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/a
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -k staged -p no:cacheprovider > /tmp/a/staged_tests.txt 2>&1
echo "staged tests rc=$? at $SECONDS s"; tail -30 /tmp/a/staged_tests.txt
timeout 150 python3 scripts/step_variants.py --steps attention_scores/vit --variant "default:" --variant "staged: EVT_STAGED_STORES=1" > /tmp/a/variants.txt 2>&1
echo "variants rc=$? at $SECONDS s"; grep -v Warning /tmp/a/variants.txt | tail -25
timeout 150 python3 benchmarks/config_sweep.py --patterns attention_scores --configs 128x256x64_c1x1_cooperative_e64,128x256x64_c1x1_cooperative_e64_ss,128x128x64_c1x1_pingpong,128x128x64_c1x1_pingpong_ss --json /tmp/a/sweep.json > /tmp/a/sweep.txt 2>&1
echo "sweep rc=$? at $SECONDS s"; grep -v Warning /tmp/a/sweep.txt | tail -40
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
left=$(( 580 - SECONDS )); [ $left -gt 60 ] && EVT_BENCH_CALL_S=$left bash scripts/bench_full.sh 4 --redo --only attention_scores/vit > /tmp/p4.txt 2>&1
echo "part 4 redo rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -10
cp /tmp/p4.txt /tmp/a/; tar -czf $OUT/callA.tar.gz -C /tmp a
