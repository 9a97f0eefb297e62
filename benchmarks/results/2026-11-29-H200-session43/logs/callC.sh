#!/usr/bin/env bash
# session 43 call C: step_variants again on the ViT and GPT-2 steps (call A's torch.compile row for
# ViT and every GPT-2 row ran eager: Dynamo's recompile limit, fixed in 262e835), then part 3
# (Inductor's max-autotune) on the steps it has not measured, the time left
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
timeout 200 python3 scripts/step_variants.py --steps step/vit,step/gpt2 \
  --variant "default:" --variant "nostats: EVT_STATISTICS=0" 2>&1 | tee $OUT/step_variants.txt | grep -v Warning
echo "step_variants rc=${PIPESTATUS[0]} at $SECONDS s"
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=$(( 575 - SECONDS )) bash scripts/bench_full.sh 3 --only step/lm_head,step/gpt2_selective,step/gpt2_checkpointed,step/gpt2_math,step/bert_math > /tmp/p3.txt 2>&1
echo "part 3 rc=$? at $SECONDS s"; grep -E "^\[max-autotune\]" /tmp/p3.txt | tail -30
