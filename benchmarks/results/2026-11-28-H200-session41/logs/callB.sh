#!/usr/bin/env bash
# session 41 call B: the full run's part 1 again for the cases attention_to_sdpa (on by default
# since session 40) changes: evt and evt-vs-torch.compile in turn; then part 4 (evt's
# max-autotune) on the 9 cases whose shortlists kernels-112 holds, continuing part 1's results
set -uo pipefail
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
EVT_BENCH_CALL_S=210 bash scripts/bench_full.sh 1 --redo --only 'attention/*,step/gpt2_math' \
  --baselines evt,in-turn > /tmp/p1.txt 2>&1
echo "part 1 rc=$? at $SECONDS s"; grep -E "^\[(evt|in-turn)\]" /tmp/p1.txt | tail -12
cp $OUT/bench/part1.log $OUT/part1.log
ls $OUT/bench/kernels-built.tar.xz 2>/dev/null && echo "part 1 built kernels (not brought back)"
bash scripts/bench_full.sh take $OUT | tail -1 && rm -rf $OUT/bench
EVT_BENCH_CALL_S=$(( 568 - SECONDS )) bash scripts/bench_full.sh 4 --resume --only \
  'bias_gelu_aux/bert-down,bias_gelu_aux/gptj,bias_gelu_aux/gptj-down,dgrad_gelu_tanh_bias_grad/vit,attention_scores/gpt2,attention_scores/bert,layernorm_stats/vit,residual_scale_cast/vit,dgrad_swiglu/tinyllama' \
  > /tmp/p4.txt 2>&1
echo "part 4 rc=$? at $SECONDS s"; grep -E "^\[evt-max-autotune\]" /tmp/p4.txt | tail -12
