#!/usr/bin/env bash
# session 49 call B: (1) the model fuzzer on real kernels for the 3 seeds from 63 whose regions
# compute SwiGLU's shared sigmoid, its op scan no longer building the kernels of the seeds it
# drops (81956b8); (2) LLaMA's step with its SwiGLU dgrad region, and with every region, left
# unfused (EVT_UNFUSE; call A's third run failed on the second: fixed in 9dc7ec4), in turn with
# torch.compile. Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/b
timeout 280 python3 scripts/model_fuzz.py --device cuda --op silu_backward_sigmoid --seed 63 --count 3 > /tmp/b/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/b/fuzz.txt | grep -v "compiled kernel" | tail -n 12
tar -czf $OUT/callB.tar.gz -C /tmp b
timeout $(( 530 - SECONDS )) python3 scripts/step_variants.py --steps step/llama --variant "default:" \
  --variant "no_b3: EVT_UNFUSE=evt_b3_*" --variant "none: EVT_UNFUSE=evt_*" > /tmp/b/sv2.txt 2>&1
echo "sv2 rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/b/sv2.txt | grep "^|\|^- \|evt:"
tar -czf $OUT/callB.tar.gz -C /tmp b
