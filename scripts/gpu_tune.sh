#!/usr/bin/env bash
# Kernel-speed work on the GPU machine in one call (carry .whl): the exhaustive config sweep over
# the suite's patterns (benchmarks/config_sweep.py), then the host-overhead breakdown and the MLP
# training-step times. Logs and JSON land in $OUT.
#   bash scripts/gpu_tune.sh [patterns]
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
export PYTHONUNBUFFERED=1
patterns=${1:-bias_relu,bias_gelu_tanh,bias_gelu_aux,dgrad_gelu,dgrad_bias_grad}
start=$(date +%s)
python3 benchmarks/config_sweep.py --patterns "$patterns" --json "$OUT/sweep.json" 2>&1 \
  | grep -v Warning | tee "$OUT/sweep.log" | tail -45
echo "sweep: $(( $(date +%s) - start )) s"
grep -rl C7510 "$EVT_CACHE_DIR" 2>/dev/null | head -3 | sed 's/^/C7510 in: /'
python3 scripts/host_overhead.py 2>&1 | grep -v Warning | tee "$OUT/host.log" | head -40
python3 scripts/mlp_step_time.py --json "$OUT/mlp_step.json" 2>&1 | tail -8 | tee "$OUT/mlp_step.log"
echo "total: $(( $(date +%s) - start )) s"
