#!/usr/bin/env bash
# session 57 call F: on real kernels, which regions of rezero_scalars and clip_loss launch and
# whether their kernels read 0-d tensors (ir.ScalarLoad), every launch verified (EVT_VERIFY=1).
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
EVT_VERIFY=1 timeout 200 python3 devcalls/scalar_check.py > /tmp/d/scalar_check.txt 2>&1
echo "rc=$? at $SECONDS s"; grep -v "Warning\|warn\|^\s*$" /tmp/d/scalar_check.txt | tail -20 | cut -c1-300
tar -czf $OUT/callF.tar.gz -C /tmp d
