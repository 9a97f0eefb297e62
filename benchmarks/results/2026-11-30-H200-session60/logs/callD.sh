#!/usr/bin/env bash
# session 60 call D: the four new HF catalog cases on real kernels against fp32 eager (Gemma 2,
# BLOOM, DeBERTa-v2, Swin; their kernels built here).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 540 python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k "test_model_trains_like_fp32_eager and (gemma2 or bloom or deberta_v2 or swin)" -rA --durations=0 > /tmp/d/gpu_hf_new.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|PASSED|FAILED|Error|assert|s call|s setup" /tmp/d/gpu_hf_new.txt | tail -14 | cut -c1-400
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-D.tar.xz 2>&1 | tail -1
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
tar -czf $OUT/callD.tar.gz -C /tmp d
