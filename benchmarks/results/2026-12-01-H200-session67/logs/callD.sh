#!/usr/bin/env bash
# session 67 call D (warm machine after call C, whose bench results did not come back: 8 files
# at most): call C's bench C1 again, then the standalone host readings again; all in one tar.
set -uo pipefail
. scripts/device_env.sh >/dev/null; export PYTHONUNBUFFERED=1; export EVT_COMPILE_JOBS=16
export EVT_BENCH_GIT_COMMIT=$(cat devcalls/commit)
R=/tmp/callD; rm -rf $R; mkdir -p $R/logs; cp devcalls/callD.sh $R/logs/
HOST='bias/bert,bias_gelu/bert,layernorm_stats/vit'
SWZ='bias_relu/gptj,bias_gelu/gptj,bias_gelu_tanh/gptj,bias_gelu_aux/gptj,bias_gelu_tanh_aux/gptj,swiglu/llama,swiglu/llama3,dgrad_swiglu/llama,dgrad_swiglu/llama3'
timeout 200 python3 -m evt.cli bench --baselines mm,evt --out $R/swizzle --only "$SWZ,$HOST" \
  --time-budget 190 --item-timeout 60 > $R/logs/bench_D1.log 2>&1
echo "bench D1 rc=$? at $SECONDS s"
timeout 90 python3 devcalls/host_probe.py "$HOST" > $R/logs/host_standalone_D.txt 2>$R/logs/host_standalone_D.err
echo "standalone rc=$? at $SECONDS s"; cat $R/logs/host_standalone_D.txt | cut -c1-200
tar -czf $OUT/callD.tar.gz -C $R .
