#!/usr/bin/env bash
# session 43 call A: does fusing the statistics pay on whole training steps? evt by default against
# evt with EVT_STATISTICS=0 (and torch.compile), in turn in one process; then part 4 (evt's
# max-autotune) on the low cases whose shortlists are carried, with the time left
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
timeout 400 python3 scripts/step_variants.py --steps step/llama,step/bert,step/vit,step/gpt2 \
  --variant "default:" --variant "nostats: EVT_STATISTICS=0" 2>&1 | tee $OUT/step_variants.txt | grep -v Warning
echo "step_variants rc=${PIPESTATUS[0]} at $SECONDS s"
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=$(( 570 - SECONDS )) bash scripts/bench_full.sh 4 --only "$(cat devcalls/callA.cases)" > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]|autotune" /tmp/p4.txt | tail -30
