#!/usr/bin/env bash
# session 56 call A: where evt's max-autotune compile of patchtst's step spends its time
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
python3 -c "import torch; print(torch.__version__)"
EVT_DEBUG=1 timeout 420 python3 devcalls/prof.py evt > /tmp/d/prof_evt.log 2>&1
echo "evt rc=$? at $SECONDS s"; grep -E "first step|max-autotune" /tmp/d/prof_evt.log | cut -c1-250 | head -30
tar -czf $OUT/callA.tar.gz -C /tmp d
