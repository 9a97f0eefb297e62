#!/usr/bin/env bash
# session 61 call B: (1) the new GPU test: EVT_WAIT_KERNELS=0 with the C++ launch path still
# building after the compile (loaded by a later call); (2) HF GPT-2's step in turn with
# torch.compile after fold_one_hot_sums, dynamic=True then static (5 rounds each); (3) the HF
# GPU tier's GPT-2 tests (static and dynamic, real kernels against fp32 eager) as time allows.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
tar -xJf .whl_models/hfsite.tar.xz -C /tmp && export PYTHONPATH=$PYTHONPATH:/tmp/hfsite
export EVT_COMPILE_JOBS=16
mkdir -p /tmp/d
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu_mlp.py -p no:cacheprovider -k launch_path_when -rA > /tmp/d/gpu_mlp_launch_path.txt 2>&1
echo "mlp rc=$? at $SECONDS s"; grep -E "passed|failed|ok:|Error|assert" /tmp/d/gpu_mlp_launch_path.txt | tail -8 | cut -c1-400
timeout 170 python3 scripts/hf_step_time.py --models gpt2 --dynamic --dim 1024 --heads 16 --seq 512 --batch 16 --rounds 5 \
  --json /tmp/d/gpt2_dynamic.json > /tmp/d/time_gpt2_dynamic.txt 2>&1
echo "dyn rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_dynamic.txt | cut -c1-400
timeout 130 python3 scripts/hf_step_time.py --models gpt2 --dim 1024 --heads 16 --seq 512 --batch 16 --rounds 5 \
  --json /tmp/d/gpt2_static.json > /tmp/d/time_gpt2_static.txt 2>&1
echo "static rc=$? at $SECONDS s"; grep -A4 "^==" /tmp/d/time_gpt2_static.txt | cut -c1-400
left=$((570 - SECONDS))
if [ $left -gt 60 ]; then
timeout $left python3 -m pytest -q -m gpu tests/test_gpu_hf_models.py -p no:cacheprovider -k gpt2 -rA > /tmp/d/gpu_hf_gpt2.txt 2>&1
echo "hf rc=$? at $SECONDS s"; grep -E "passed|failed|PASSED|FAILED|Error|assert" /tmp/d/gpu_hf_gpt2.txt | tail -8 | cut -c1-400
fi
grep -l "C7510\|lmem\|local memory" "$EVT_CACHE_DIR"/*/build.log 2>/dev/null | head -3
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz 2>&1 | tail -1
tar -czf $OUT/callB.tar.gz -C /tmp d
