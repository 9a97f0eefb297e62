#!/usr/bin/env bash
# One device call for a session's open questions (carry .whl), logs in $OUT:
#   the RMSNorm GPU test, LayerNorm-backward ablation (scripts/spec_ablation.py) in parallel,
#   then max-autotune's per-region decisions on the GPT-2 and BERT steps (scripts/step_autotune.py).
set -uo pipefail
OUT=${OUT:-/tmp/evt-out}
mkdir -p "$OUT"
. scripts/device_env.sh
P="-q -p no:cacheprovider -p no:logging --show-capture=no --tb=short"
which cuobjdump >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
timeout 240 python3 -m pytest $P -m gpu tests/test_rmsnorm.py > "$OUT/rms.log" 2>&1 &
timeout 300 python3 scripts/spec_ablation.py ${ABLATION_ARGS:-} > "$OUT/ablation.log" 2>&1
wait
tail -3 "$OUT/rms.log"; grep -v Warning "$OUT/ablation.log"
EVT_DEBUG=1 timeout ${AUTOTUNE_S:-260} python3 scripts/step_autotune.py ${AUTOTUNE_ARGS:-} \
  > "$OUT/autotune.log" 2>&1
grep "autotune\|==" "$OUT/autotune.log" | cut -c1-220
grep -rl C7510 "$EVT_CACHE_DIR" 2>/dev/null | head -3
