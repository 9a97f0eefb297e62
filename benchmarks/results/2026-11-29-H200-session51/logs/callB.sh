#!/usr/bin/env bash
# session 51 call B: (1) the last 6 of call A's selected nn-module GPU tests (call A's 300 s ran
# out after 8 passed: its fixture captured all 44 modules first; now only the selected);
# (2) the GEMM+epilogue suite continued (call A measured mm; evt's kernels it built are in .kpack
# now). Carry .whl, .kpack, devcalls, out/bench51.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
K="top_two_experts or masked_softmax or activations or unbiased_statistics or single_row or compiled_autograd"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "$K" > /tmp/d/nn_modules_tests.txt 2>&1
echo "tests rc=$? at $SECONDS s"; grep -v "^DEBUG\|^INFO" /tmp/d/nn_modules_tests.txt | tail -n 30
tar -czf $OUT/callB.tar.gz -C /tmp d
cp -r out/bench51 /tmp/d/bench && chmod -R u+w /tmp/d/bench
left=$(( 575 - SECONDS ))
timeout $left python3 -m evt.cli bench --resume --baselines mm,evt --out /tmp/d/bench \
  --only 'bias*,dgrad*,residual*,layernorm*,swiglu*,softmax*,ce_*,attention*' \
  --time-budget $(( left - 15 )) --item-timeout 150 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; tail -n 5 /tmp/d/bench.log
python3 scripts/kernel_pack.py pack --new --out /tmp/d/kernels-B.tar.xz > /tmp/d/pack.txt 2>&1
tar -czf $OUT/callB.tar.gz -C /tmp d
