#!/usr/bin/env bash
# session 55 call B: the nn catalog's seven new blocks on real kernels against fp32 eager, then
# an exhaustive-over-four-configs sweep of the reductions over M (bias gradients, BatchNorm's
# column statistics) at small K, and of PatchTST's two dgrad regions at their problems.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py \
  -k "convnext_block or mixer_block or window_attention or t5_gated_ff or clip_loss or layer_scale_drop_path or highway" \
  > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callB.tar.gz -C /tmp d
CF=128x256x64_c1x1_cooperative,256x128x64_c1x1_cooperative,128x128x64_c1x1_cooperative,128x128x64_c1x1_pingpong
SH=131072x256x128,131072x128x256,32768x512x256,16384x1024x512,8192x3072x768
timeout 260 python3 benchmarks/config_sweep.py --patterns dgrad_bias_grad,dgrad_gelu_tanh_bias_grad,dgrad_gelu_tanh,batchnorm_stats --bare \
  --configs $CF --shapes $SH --json /tmp/d/config_sweep_reductions_over_m.json > /tmp/d/sweep_patterns.log 2>&1
echo "sweep patterns rc=$? at $SECONDS s"; tail -n 5 /tmp/d/sweep_patterns.log
tar -czf $OUT/callB.tar.gz -C /tmp d
timeout $(( 570 - SECONDS )) python3 benchmarks/config_sweep.py --steps step/patchtst --regions b4,b5 --configs $CF \
  --json /tmp/d/config_sweep_patchtst.json > /tmp/d/sweep_patchtst.log 2>&1
echo "sweep patchtst rc=$? at $SECONDS s"; tail -n 5 /tmp/d/sweep_patchtst.log
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz > /dev/null 2>&1
tar -czf $OUT/callB.tar.gz -C /tmp d
