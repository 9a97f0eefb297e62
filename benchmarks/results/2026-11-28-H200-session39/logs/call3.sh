#!/usr/bin/env bash
# session 39 call 3: the finishing kernel's programmatic dependent launch (PDL), A/B against
# EVT_PDL=0 in turn, then the GPU tests of the statistics and the MLP's CUDA graphs
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p $OUT/ab
CASES='dgrad_bias_grad/*,dgrad_gelu_tanh_bias_grad/*,layernorm_stats/*,ce_forward/*'
for run in on1 off1 on2 off2; do
  [ $SECONDS -gt 230 ] && { echo "skipping $run: $SECONDS s gone"; continue; }
  pdl=1; [[ $run == off* ]] && pdl=0
  EVT_PDL=$pdl timeout 110 python3 -m evt.bench --only "$CASES" --baselines mm,evt \
    --out $OUT/ab/$run > $OUT/ab/$run.log 2>&1
  echo "$run (EVT_PDL=$pdl) rc=$? at $SECONDS s"; grep -E "\] .* (evt|mm) " $OUT/ab/$run.log | tail -24
done
left=$(( 440 - SECONDS ))
echo "pytest gets $left s"
timeout $left python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=10 \
  tests/test_gpu_mlp.py::test_cuda_graphs "tests/test_gpu_mlp.py::test_training_step_matches_eager" \
  tests/test_gpu_statistics.py tests/test_gpu_ops.py > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -25 $OUT/pytest.log
cd $OUT && tar -czf ab.tar.gz ab && rm -rf ab
