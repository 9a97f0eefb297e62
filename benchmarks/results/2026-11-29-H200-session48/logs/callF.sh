#!/usr/bin/env bash
# session 48 call F: the model fuzzer on real kernels for the first 3 seeds from 63 whose regions
# compute SwiGLU's shared sigmoid (bf16 against fp32 eager, no fallback); their kernels built on
# the CPU machine (devcalls/fuzz_kernels.py, in .kpack). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/f
timeout 450 python3 scripts/model_fuzz.py --device cuda --op silu_backward_sigmoid --seed 63 --count 3 > /tmp/f/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/f/fuzz.txt | tail -n 12
tar -czf $OUT/callF.tar.gz -C /tmp f
