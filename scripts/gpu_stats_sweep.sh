#!/usr/bin/env bash
# Statistics kernels on the device, in one call (carry .whl): their GPU tier, their timings against
# cuBLAS and torch.compile per case (bench_gap), and the tile-config sweep of their patterns.
# Logs land in $OUT. Usage (device): bash scripts/gpu_stats_sweep.sh
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
python3 -m pytest -q -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  tests/test_gpu_statistics.py 2>&1 | tail -15 | tee "$OUT/stats_tests.log"
python3 benchmarks/config_sweep.py --patterns softmax_stats,ce_forward,layernorm_stats \
  --json "$OUT/sweep_stats.json" 2>&1 | grep -v "UserWarning\|_warn_once\|compiled kernel" \
  > "$OUT/sweep_stats.log"; grep -A20 "^pattern/shape" "$OUT/sweep_stats.log"
python3 scripts/bench_gap.py --baselines mm,evt,compile \
  --cases softmax_stats/gpt2,ce_forward/gpt2,layernorm_stats/bert,layernorm_stats/gpt2 \
  --json "$OUT/stats_gap.json" 2>&1 | grep -v "compiled kernel\|UserWarning\|_warn_once" \
  > "$OUT/stats_gap.log"; grep "==\|bench\|  [0-9. ]* us  x" "$OUT/stats_gap.log" | cut -c1-110
