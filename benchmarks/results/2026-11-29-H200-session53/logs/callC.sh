#!/usr/bin/env bash
# session 53 call C (diagnostic): the layouts Inductor hands PatchTST's backward regions on CUDA
# (the post-grad graph's metas and the runtime strides), as committed and with the inputs
# constrained to the graph's exact strides (eager_input_vals); Inductor's code for both.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
mkdir -p /tmp/d
export TORCHINDUCTOR_FORCE_DISABLE_CACHES=1
TORCH_LOGS=output_code timeout 150 python3 devcalls/diag.py cuda full > /tmp/d/diag_default.txt 2> /tmp/d/diag_default_code.txt
echo "default rc=$? at $SECONDS s"; grep -E "^(torch|WARN|done)|POST evt_b3|RUN evt_b3" /tmp/d/diag_default.txt | head -12
EXACT=1 TORCH_LOGS=output_code timeout 150 python3 devcalls/diag.py cuda full > /tmp/d/diag_exact.txt 2> /tmp/d/diag_exact_code.txt
echo "exact rc=$? at $SECONDS s"; grep -E "^(WARN|done)|POST evt_b3|RUN evt_b3" /tmp/d/diag_exact.txt | head -12
tar -czf $OUT/callC.tar.gz -C /tmp d
