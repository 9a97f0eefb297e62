#!/usr/bin/env bash
# session 49 call F: the model fuzzer on real kernels for seeds 502 and 503, whose programs
# checkpoint blocks selectively (recompute_for_backward's chains, now copied in order); kernels
# built on the device. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/f
timeout 230 python3 scripts/model_fuzz.py --device cuda --seed 502 --count 2 > /tmp/f/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/f/fuzz.txt | grep -v "compiled kernel " | tail -n 8
tar -czf $OUT/callF.tar.gz -C /tmp f
