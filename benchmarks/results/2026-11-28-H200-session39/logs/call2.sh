#!/usr/bin/env bash
# session 39 call 2: the rest of test_gpu_models.py, then evt's max-autotune (part 4) --resume
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
(
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 270 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=20 \
  "tests/test_gpu_models.py::test_dynamic_shapes_step_matches_fp32[bert]" \
  tests/test_gpu_models.py::test_recompute_outside_step_matches_fp32 \
  tests/test_gpu_models.py::test_autocast_step_matches_fp32 \
  > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -30 $OUT/pytest.log
)
left=$(( 588 - SECONDS ))
echo "part 4 gets $left s"
EVT_BENCH_CALL_S=$left bash scripts/bench_full.sh 4 --resume --only 'dgrad_gelu_tanh_bias_grad/*,dgrad_gelu/*,bias_gelu_aux/*,dgrad_gelu_tanh/*' 2>&1 | grep -v "^E11\|^  \|triton_mm\|^AUTOTUNE\|^strides\|^dtypes" | tail -40
