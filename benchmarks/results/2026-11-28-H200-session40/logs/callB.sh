#!/usr/bin/env bash
# session 40 call B: EVT_PDL=1 against EVT_PDL=2 on 16 GEMM cases, runs in turn (2 1 2 1),
# then issue #7's compile targets at this commit (BERT's step, cold and warm, fresh processes)
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/sha)
mkdir -p $OUT/ab
CASES='bias/gpt2,bias_relu/gpt2,bias_gelu_tanh/gpt2,bias_gelu/gpt2,bias_gelu_aux/gpt2,dgrad_gelu_tanh/gpt2,dgrad_gelu/gpt2,dgrad_bias_grad/gpt2,dgrad_gelu_tanh_bias_grad/gpt2,layernorm_stats/gpt2,residual_scale_cast/gpt2,swiglu/tinyllama,attention_scores/bert,attention_scores/vit,bias/bert-down,layernorm_stats/bert'
for run in gemm1 stream1 gemm2 stream2; do
  [ $SECONDS -gt 300 ] && { echo "skipping $run: $SECONDS s gone"; continue; }
  pdl=1; [[ $run == gemm* ]] && pdl=2
  EVT_PDL=$pdl timeout 100 python3 -m evt.bench --only "$CASES" --baselines mm,evt \
    --out $OUT/ab/$run > $OUT/ab/$run.log 2>&1
  echo "$run (EVT_PDL=$pdl) rc=$? at $SECONDS s"
done
python3 scripts/ab_compare.py --a $OUT/ab/gemm1,$OUT/ab/gemm2 --b $OUT/ab/stream1,$OUT/ab/stream2 \
  --labels "PDL 2,PDL 1" | tee $OUT/ab_table.md
left=$(( 560 - SECONDS ))
echo "compile targets get $left s"
EVT_CACHE_DIR= timeout $left python3 scripts/compile_targets.py --step step/bert --out $OUT/compile_targets.json
echo "done at $SECONDS s"
cd $OUT && tar -czf ab.tar.gz ab && rm -rf ab
