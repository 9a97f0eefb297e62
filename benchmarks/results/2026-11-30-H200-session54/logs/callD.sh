#!/usr/bin/env bash
# session 54 call D: patchtst under evt's max-autotune (its shortlists' kernels built here and
# carried in .kpack) beside evt's default mode, then torch.compile and Inductor's max-autotune,
# in one results folder.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 170 python3 -m evt.cli bench --baselines evt,evt-max-autotune --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget 160 --item-timeout 140 > /tmp/d/bench_evt.log 2>&1
echo "evt bench rc=$? at $SECONDS s"; grep -E "\] step" /tmp/d/bench_evt.log | tail -n 4
tar -czf $OUT/callD.tar.gz -C /tmp d
left=$(( 345 - SECONDS ))
timeout $left python3 -m evt.cli bench --resume --baselines compile,max-autotune --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget $(( left - 10 )) --item-timeout $(( left - 20 )) > /tmp/d/bench_inductor.log 2>&1
echo "inductor bench rc=$? at $SECONDS s"; grep -E "\] step" /tmp/d/bench_inductor.log | tail -n 4
tar -czf $OUT/callD.tar.gz -C /tmp d
