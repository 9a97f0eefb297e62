#!/usr/bin/env bash
# Statistics kernels on the device, in one call (carry .whl): the GPU tier for them (every node
# kind, edge cases, determinism, training steps) and their speed against cuBLAS and
# torch.compile per case (kernel times from torch.profiler). Logs land in $OUT.
# Usage (device, carry .whl): bash scripts/gpu_stats.sh [models]   (models: also the GPT-2/BERT
# training tests, whose LayerNorm and cross-entropy regions use these kernels)
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
tests=(tests/test_gpu_statistics.py)
[ "${1:-}" = models ] && tests+=(tests/test_gpu_models.py)
python3 -m pytest -q -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  "${tests[@]}" 2>&1 | tail -40 | tee "$OUT/stats_tests.log"
python3 scripts/bench_gap.py --baselines mm,evt,compile \
  --cases softmax_stats/gpt2,ce_forward/gpt2,ce_backward/gpt2,layernorm_stats/bert,layernorm_stats/gpt2 \
  --json "$OUT/stats_gap.json" 2>&1 | grep -v "compiled kernel\|UserWarning\|_warn_once" \
  | tee "$OUT/stats_gap.log" | tail -60
