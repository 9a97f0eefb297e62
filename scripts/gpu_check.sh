#!/usr/bin/env bash
# Everything the GPU machine is for, in one call (see ../shared/gpu/README.md):
#   install the carried wheels and evt, run the GPU tests, time the MLP training step.
# Usage on the device (carry .whl):  bash scripts/gpu_check.sh [tests|bench] [pytest args]
# (logs and JSON land in $OUT). `tests` (default): GPU tests + MLP step time; `bench`: evt bench --quick
# (its own 170 s budget). The full benchmark is scripts/bench_full.sh, over several calls.
set -uo pipefail
mode=${1:-tests}
shift || true
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >"$OUT/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >>"$OUT/gpu.txt"
if [ "$mode" = bench ]; then
  mkdir -p "$OUT/bench"
  PYTHONUNBUFFERED=1 python3 benchmarks/run.py --quick --out "$OUT/bench" "$@" 2>&1 \
    | tee "$OUT/bench/quick.log" | tail -40
  exit 0
fi
start=$(date +%s)
# -v: one line per test as it finishes, so a call cut short by the device's limit still says
# which tests passed (with -q a killed pytest leaves only dots)
python3 -m pytest -v -m gpu -p no:cacheprovider -p no:logging --show-capture=no --tb=short -rf \
  tests/ "${@}" >"$OUT/gpu_tests.log" 2>&1
grep -E "FAILED|ERROR|passed|failed" "$OUT/gpu_tests.log" | tail -40
echo "$(grep -c PASSED "$OUT/gpu_tests.log") passed ($OUT/gpu_tests.log)"
echo "gpu tests: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu_tests.log"
grep -rl C7510 "$EVT_CACHE_DIR" 2>/dev/null | head -3 | sed 's/^/C7510 in: /' | tee -a "$OUT/gpu_tests.log"
python3 scripts/mlp_step_time.py --json "$OUT/mlp_step.json" 2>&1 | tail -8 | tee "$OUT/mlp_step.log"
