#!/usr/bin/env bash
# session 49 call A: (1) the model fuzzer on real kernels for the 3 seeds from 63 whose regions
# compute SwiGLU's shared sigmoid (session 48's call F, which returned nothing); (2) LLaMA's step
# with each of its six regions left unfused in turn (EVT_UNFUSE), in turn with torch.compile.
# Kernels built here (.kpack). Carry .whl, .kpack, devcalls.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/a
timeout 170 python3 scripts/model_fuzz.py --device cuda --op silu_backward_sigmoid --seed 63 --count 3 > /tmp/a/fuzz.txt 2>&1
echo "fuzz rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/a/fuzz.txt | tail -n 12
tar -czf $OUT/callA.tar.gz -C /tmp a
left=$(( 540 - SECONDS ))
timeout $(( left * 6 / 10 )) python3 scripts/step_variants.py --steps step/llama --variant "default:" \
  --variant "no_f1: EVT_UNFUSE=evt_f1_*" --variant "no_f2: EVT_UNFUSE=evt_f2_*" \
  --variant "no_f3: EVT_UNFUSE=evt_f3_*" --variant "no_b4: EVT_UNFUSE=evt_b4_*" \
  --variant "no_b5: EVT_UNFUSE=evt_b5_*" > /tmp/a/sv1.txt 2>&1
echo "sv1 rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/a/sv1.txt | grep "^|" 
tar -czf $OUT/callA.tar.gz -C /tmp a
timeout $(( 540 - SECONDS )) python3 scripts/step_variants.py --steps step/llama --variant "default:" \
  --variant "no_b9: EVT_UNFUSE=evt_b9_*" --variant "none: EVT_UNFUSE=evt_*" > /tmp/a/sv2.txt 2>&1
echo "sv2 rc=$? at $SECONDS s"; grep -v "^W11\|Warning" /tmp/a/sv2.txt | grep "^|"
tar -czf $OUT/callA.tar.gz -C /tmp a
