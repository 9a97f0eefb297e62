#!/usr/bin/env bash
# session 50 call A: (1) tests/test_gpu_nn_modules.py: 35 common torch.nn modules, bf16 on real
# kernels against fp32 eager (the kernels built here are carried in .kpack/nn50.tar.xz; the rest
# build first, in parallel); (2) GPT-J's tile orders, the same process timing every order of each
# kernel, three processes in turn (config_sweep.py; 128x256 cooperative, evt's rule gives 0:4 at
# the up projection and 0:0 at the down projection; evt's max-autotune chose 0:8 or 0:4 in 7 of
# 10 GPT-J cases in session 48). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 420 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py > /tmp/d/nn_modules_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; tail -n 25 /tmp/d/nn_modules_tests.txt
python3 scripts/kernel_pack.py pack --new --out $OUT/kernels-A.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callA.tar.gz -C /tmp d
for r in 1 2 3; do
  [ $SECONDS -gt 520 ] && break
  timeout $(( 570 - SECONDS )) python3 benchmarks/config_sweep.py --patterns bias_relu,bias_gelu_tanh,bias_gelu_aux \
    --shapes 8192x16384x4096,8192x4096x16384 --configs 128x256x64_c1x1_cooperative \
    --tile-orders 0:0,0:1,0:2,0:4,0:8,1:4,1:8,2:4,2:8 --json /tmp/d/gptj_orders_$r.json > /tmp/d/gptj_orders_$r.log 2>&1
  echo "sweep $r rc=$? at $SECONDS s"
  tar -czf $OUT/callA.tar.gz -C /tmp d
done
