#!/usr/bin/env bash
# session 54 call A: evt::fused_gemm with needs_exact_strides and each call's input layouts in its
# eager_input_vals (record_input_layouts) on the H200's torch 2.11: the CPU Inductor layout test,
# the nn catalog's permuting modules (no input relaid: guards.RELAID), the operand-copy test; the
# patchtst step (eager, evt, torch.compile, in turn) with EVT_DEBUG=1's copy report.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p /tmp/d
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > /tmp/d/gpu.txt
python3 - > /tmp/d/torch_layout_path.txt 2>&1 <<'PY'
import inspect, torch
from torch._inductor import lowering, graph
print("torch", torch.__version__)
print(inspect.getsource(lowering.constrain_to_fake_tensor))
print(inspect.getsource(lowering.tag_to_layout_constraint))
src = inspect.getsource(graph.GraphLowering.call_function)
print("call_function reads eager_input_vals:", "eager_input_vals" in src)
PY
head -3 /tmp/d/torch_layout_path.txt; grep "reads eager" /tmp/d/torch_layout_path.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_batch_statistics.py -k "inductor_hands" > /tmp/d/cpu_layout_test.txt 2>&1
echo "cpu layout rc=$? at $SECONDS s"; tail -n 2 /tmp/d/cpu_layout_test.txt
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_configs.py -k "laid_out_against" > /tmp/d/configs_tests.txt 2>&1
echo "configs rc=$? at $SECONDS s"; tail -n 2 /tmp/d/configs_tests.txt
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_nn_modules.py -k "transposed_batchnorm or encoder_pre_norm_gelu or linear_batchnorm or einsum_heads" > /tmp/d/nn_modules_tests.txt 2>&1
echo "nn rc=$? at $SECONDS s"; tail -n 3 /tmp/d/nn_modules_tests.txt
tar -czf $OUT/callA.tar.gz -C /tmp d
left=$(( 575 - SECONDS ))
EVT_DEBUG=1 timeout $left python3 -m evt.cli bench --baselines eager,evt,compile,in-turn --out /tmp/d/bench \
  --only 'step/patchtst' --time-budget $(( left - 15 )) --item-timeout 200 > /tmp/d/bench.log 2>&1
echo "bench rc=$? at $SECONDS s"; grep -E "\] step|copied into rows|unfused" /tmp/d/bench.log | tail -n 12
tar -czf $OUT/callA.tar.gz -C /tmp d
