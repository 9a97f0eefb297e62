#!/usr/bin/env bash
# session 45 call B: the staged-store tests again (test fixed), part 4 --redo on ViT's scores (each
# candidate timed with the dense copy), the model fuzzer on seeds that draw BERT's padding mask
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/b
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu_configs.py -k staged -p no:cacheprovider > /tmp/b/staged_tests.txt 2>&1
echo "staged tests rc=$? at $SECONDS s"; tail -5 /tmp/b/staged_tests.txt
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_DEBUG=1 EVT_BENCH_CALL_S=150 bash scripts/bench_full.sh 4 --redo --only attention_scores/vit > /tmp/b/p4.txt 2>&1
echo "part 4 redo rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|autotune evt|dense cop" /tmp/b/p4.txt | tail -10
timeout $(( 585 - SECONDS )) python3 scripts/model_fuzz.py --device cuda --mask padding --count 12 --seed 60000 > /tmp/b/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v Warning /tmp/b/fuzz.txt | tail -12
tar -czf $OUT/callB.tar.gz -C /tmp b
