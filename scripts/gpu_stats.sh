#!/usr/bin/env bash
# Statistics kernels on the device, in one call (carry .whl): their GPU tier (every node kind,
# edge cases, determinism, training steps) and their speed against cuBLAS and torch.compile per
# case (scripts/bench_gap.py: kernel times from torch.profiler). Logs land in $OUT.
# Usage (device): bash scripts/gpu_stats.sh [models] [sweep] [ncu]
#   models: also the GPT-2/BERT/MLP training tests (their LayerNorm and cross-entropy regions)
#   sweep:  also the tile-config sweep of the statistics patterns (benchmarks/config_sweep.py)
#   ncu:    also Nsight Compute on the evt kernel of softmax_stats/gpt2 and ce_forward/gpt2
#           (stall reasons, hottest SASS; scripts/ncu_case.py)
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
want() { local w=$1; shift; [[ " $* " == *" $w "* ]]; }  # want WORD "$@"
tests=(tests/test_gpu_statistics.py)
want models "$@" && tests+=(tests/test_gpu_models.py tests/test_gpu_mlp.py)
python3 -m pytest -q -p no:cacheprovider -p no:logging --show-capture=no --tb=short \
  "${tests[@]}" > "$OUT/stats_tests.log" 2>&1
grep -A12 "^____\|^FAILED\|^ERROR\| passed\| failed" "$OUT/stats_tests.log" | head -80
python3 scripts/bench_gap.py --baselines mm,evt,compile \
  --cases softmax_stats/gpt2,ce_forward/gpt2,ce_backward/gpt2,layernorm_stats/bert,layernorm_stats/gpt2 \
  --json "$OUT/stats_gap.json" 2>&1 | grep -v "compiled kernel\|UserWarning\|_warn_once" \
  > "$OUT/stats_gap.log"
grep "==\|bench\|  [0-9. ]* us  x" "$OUT/stats_gap.log" | cut -c1-120
if want sweep "$@"; then
  python3 benchmarks/config_sweep.py --patterns softmax_stats,ce_forward,layernorm_stats \
    --json "$OUT/sweep_stats.json" 2>&1 | grep -v "UserWarning\|_warn_once\|compiled kernel" \
    > "$OUT/sweep_stats.log"
  grep -A20 "^pattern/shape" "$OUT/sweep_stats.log"
fi
if want ncu "$@"; then
  for c in softmax_stats/gpt2 ce_forward/gpt2; do
    f="$OUT/ncu_${c//\//_}.txt"
    ncu --profile-from-start off --kernel-name regex:device_kernel --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SourceCounters \
      --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
      python3 scripts/ncu_case.py "$c" > "$f" 2>&1
    echo "== ncu $c: $f"
    grep -A3 "Duration\|Warp Cycles Per Issued\|Est. Speedup\|Est. Local Speedup" "$f" | head -30
  done
fi
