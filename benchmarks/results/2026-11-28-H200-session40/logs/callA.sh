#!/usr/bin/env bash
# session 40 call A: every GPU test file with EVT_PDL=2 (the GEMM itself launched
# programmatically), side by side; also the first GPU run of the kernels built with the grid
# dependency control in the default mode
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_PDL=2
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
EVT_COMPILE_JOBS=6 bash scripts/gpu_parallel.sh 540 \
  "models: tests/test_gpu_models.py --durations=20" \
  "mlp: tests/test_gpu_mlp.py --deselect tests/test_gpu_mlp.py::test_new_batch_size_reuses_binaries --durations=20" \
  "kernels: tests/test_gpu_statistics.py tests/test_gpu_ops.py tests/test_gpu_one_hot.py tests/test_gpu_node_coverage.py tests/test_gpu_nested_batch.py tests/test_gpu_configs.py --durations=20" \
  "fuzz: tests/test_gpu_fuzz.py tests/test_gpu_batched.py tests/test_gpu_lora.py tests/test_gpu_checkpointing.py --durations=20"
grep -l "C7510" $OUT/logs/*.log /tmp/evt-cache/*/*.log 2>/dev/null | head -3
echo "done at $SECONDS s"
