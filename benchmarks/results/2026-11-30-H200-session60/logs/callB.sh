#!/usr/bin/env bash
# session 60 call B: the loss graph alone under evt and Inductor, static and dynamic (Triton code kept)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
for be in evt inductor; do for dy in static dyn; do
  TORCH_LOGS=output_code timeout 120 python3 devcalls/loss_probe.py $be $dy > /tmp/d/loss_${be}_${dy}.txt 2>&1
  echo "rc=$? $(grep RESULT /tmp/d/loss_${be}_${dy}.txt)"; grep -E "Error|error:" /tmp/d/loss_${be}_${dy}.txt | head -3
done; done
echo "at $SECONDS s"
tar -czf $OUT/callB.tar.gz -C /tmp d
