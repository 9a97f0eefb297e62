#!/usr/bin/env bash
# session 57 call E: 0-d tensor operands in the epilogue (ir.ScalarLoad, new) on real kernels:
# the nn catalog's rezero_scalars (new: a learned alpha and temperature after fc2), clip_loss
# (its backward now reads the learned scale) and kl_smooth_l1_bce (a 0-d zero in its BCE's
# minimum), bf16 against fp32 eager (tests/test_gpu_nn_modules.py). Kernels built on the CPU
# machine and carried.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_nn_modules.py -k "rezero_scalars or clip_loss or kl_smooth_l1_bce" -p no:cacheprovider > /tmp/d/gpu_nn.txt 2>&1
echo "tests rc=$? at $SECONDS s"; grep -E "passed|failed|Error|assert" /tmp/d/gpu_nn.txt | tail -12 | cut -c1-300
grep -h "compiled kernel" /tmp/d/gpu_nn.txt | head -5
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-E.tar.xz 2>&1 | tail -1
tar -czf $OUT/callE.tar.gz -C /tmp d
