#!/usr/bin/env bash
# session 66 call D: (1) the bench's nvidia-smi sampler against evt's, mm's and torch.compile's
# host time, in one process; (2) the last 4 of test_gpu_models.py. Carry .whl, .kpack.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
mkdir -p $OUT/logs; cp devcalls/callD.sh devcalls/sampler_ab.py $OUT/logs/
date +%T
timeout 120 python3 devcalls/sampler_ab.py 'bias_gelu/bert,layernorm_stats/vit' > $OUT/logs/sampler_ab.txt 2>&1; echo "sampler ab rc=$? at $SECONDS s"
grep -E "quiet|sampled" $OUT/logs/sampler_ab.txt
date +%T
timeout $(( 330 - SECONDS )) python3 -m pytest -v -m gpu -p no:cacheprovider --tb=short -rf tests/test_gpu_models.py -k "recompute_outside_step_matches_fp32 and llama or autocast" > $OUT/logs/gpu_tests_D.txt 2>&1; echo "models rc=$?"; grep -E "passed|failed" $OUT/logs/gpu_tests_D.txt | tail -2
date +%T
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3; echo "c7510/lmem check done"
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-D.tar.xz 2>&1 | tail -1
