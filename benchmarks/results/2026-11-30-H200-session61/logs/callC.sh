#!/usr/bin/env bash
# session 61 call C: (1) call B's failed GPU test again (its child lost the carried wheels'
# PYTHONPATH); (2) HF GPT-2's step profiled: evt dynamic with and without fold_one_hot_sums,
# torch.compile dynamic, evt static with and without it (devcalls/prof_gpt2.py), with the
# cross-entropy kernels' Triton source.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_mlp.py -p no:cacheprovider -k launch_path_when -rA > /tmp/d/gpu_mlp_launch_path.txt 2>&1
echo "mlp rc=$? at $SECONDS s"; grep -E "passed|failed|ok:|Error|assert" /tmp/d/gpu_mlp_launch_path.txt | tail -8 | cut -c1-400
timeout $((560 - SECONDS)) python3 devcalls/prof_gpt2.py /tmp/d/triton_src > /tmp/d/prof_gpt2.txt 2>&1
echo "prof rc=$? at $SECONDS s"; grep -E "^==|CE kernels" /tmp/d/prof_gpt2.txt | cut -c1-600
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-C.tar.xz 2>&1 | tail -1
tar -czf $OUT/callC.tar.gz -C /tmp d
