#!/usr/bin/env bash
# Where the statistics kernels spend their time, in one device call (carry .whl): Nsight Compute
# on the evt kernel of a few suite cases (stall reasons, hottest SASS), then the tile-config sweep
# of the statistics patterns. Logs land in $OUT.
# Usage (device): bash scripts/gpu_stats_profile.sh [case,case,...]
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
cases=${1:-softmax_stats/gpt2,ce_forward/gpt2}
for c in ${cases//,/ }; do
  f="$OUT/ncu_${c//\//_}.txt"
  ncu --profile-from-start off --kernel-name regex:device_kernel --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters \
    --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
    python3 scripts/ncu_case.py "$c" > "$f" 2>&1
  echo "== $c"; grep -v "^==PROF==\|^evt:\|^\[evt\]" "$f" | grep -A200 "device_kernel" | head -120
done
python3 benchmarks/config_sweep.py --patterns softmax_stats,ce_forward,layernorm_stats \
  --json "$OUT/sweep_stats.json" 2>&1 | grep -v "UserWarning\|_warn_once\|compiled kernel" \
  | tee "$OUT/sweep_stats.log" | tail -60
